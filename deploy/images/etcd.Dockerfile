# Assembled by deploy/build-images.sh: Debian's etcd binary and the libraries it links.
FROM scratch
COPY rootfs/ /
COPY --chown=10001:10001 data/ /var/lib/etcd/
ENV PATH=/usr/local/bin ETCD_DATA_DIR=/var/lib/etcd
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/etcd"]
