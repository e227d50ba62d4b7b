# Assembled by deploy/build-images.sh: release binaries and the libraries they link.
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/keel-apiserver"]
