# Assembled by deploy/build-images.sh: release binaries and the libraries they link.
FROM scratch
COPY rootfs/ /
# Where compose mounts the stack's certificates: a new volume takes this owner, so keel-certs
# (running as the user below) can write into it.
COPY --chown=10001:10001 certs/ /certs/
ENV PATH=/usr/local/bin
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/keel-apiserver"]
