# The Forelead image: the control plane (`serve`, the default) and the runner (`runner ...`),
# one image. Built by scripts/ci/image.sh from a context it assembles (the compiled command in
# dist/, production node_modules only) on a base made locally by scripts/ci/base-image.sh (no
# registry needed): docs/deploy.md, "Container image".
#   docker run --read-only --tmpfs /tmp -v forelead:/var/lib/forelead \
#     -v forelead-key:/etc/forelead -p 8443:8443 forelead:local
ARG BASE=forelead-base:local

# Stage 1: the base (node, its libraries, the user forelead and /var/lib/forelead owned by it)
# with the application in /opt/forelead, owned by root: the runtime user cannot change it.
FROM ${BASE} AS assemble
LABEL forelead.stage=assemble
COPY app/ /opt/forelead/

# Stage 2: that file system as one layer: a self-contained image (a `docker save` of it loads
# where the locally made base does not exist), and one full copy fewer on the vfs storage driver,
# which stores every layer as a complete file system.
FROM scratch
COPY --from=assemble / /
ENV PATH=/usr/local/bin NODE_ENV=production
# Not root; it writes only to the state directory and the secrets key's directory, two volumes (the
# root file system may be read-only): a backup of the data never carries the key that opens it.
USER 10001:10001
WORKDIR /var/lib/forelead
VOLUME ["/var/lib/forelead", "/etc/forelead"]
EXPOSE 8443 9464
ENTRYPOINT ["node", "/opt/forelead/bin/forelead.js"]
CMD ["serve", "--listen", "0.0.0.0:8443", "--metrics-listen", "0.0.0.0:9464", "--data-dir", "/var/lib/forelead", "--certs-dir", "/var/lib/forelead/certs", "--secrets-key", "/etc/forelead/secrets.key"]
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s CMD ["node", "-e", "fetch('http://127.0.0.1:9464/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
