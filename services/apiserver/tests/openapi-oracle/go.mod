module openapi-oracle

go 1.19
