# Assembled by deploy/build-images.sh: Debian's HAProxy and the libraries it links, keel-probe for
# the health check. Its configuration comes from the stack (a swarm config, deploy/swarm/edge.cfg).
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
USER 10001:10001
ENTRYPOINT ["/usr/local/bin/haproxy", "-db", "-f", "/etc/haproxy/haproxy.cfg"]
