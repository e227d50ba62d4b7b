module smd-oracle

go 1.19
