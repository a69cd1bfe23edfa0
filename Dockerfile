# imserver container image: a static binary (modernc SQLite is pure Go, so
# CGO is off) on an empty base, running as a non-root user, with the
# database and files in the /data volume.
#   make image                      (tags imserver:<git describe> and :latest)
#   docker run -p 8080:8080 -v imserver-data:/data imserver
# Every config key is an IMSERVER_* variable (README, "Deploy").

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
		-o /out/imserver . \
	&& mkdir -p /out/data /out/tmp && chmod 1777 /out/tmp

FROM scratch
# CA roots for HTTPS webhooks and TLS Redis.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/imserver /imserver
# The volume's mount point belongs to the runtime user, so a fresh named
# volume is writable by it.
COPY --from=build --chown=65532:65532 /out/data /data
# SQLite writes temporary files (a migration's sorts and statement
# journals) to /tmp; an empty image has none, and migration 0016 failed
# there with "disk I/O error" on a database of a few thousand messages.
COPY --from=build /out/tmp /tmp
ENV IMSERVER_ADDR=0.0.0.0:8080 \
	IMSERVER_DB=/data/imserver.db
USER 65532:65532
VOLUME /data
EXPOSE 8080
# No curl in an empty image: the binary asks its own /healthz.
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
	CMD ["/imserver", "healthcheck"]
# SIGTERM stops gracefully (stop accepting, flush acks and writes, close
# sockets with 1001) within 10 s; compose.yaml gives it more.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/imserver"]
CMD ["serve"]
