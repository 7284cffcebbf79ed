# Multi-stage build: a static-as-possible warmpath with libczmq at runtime.
FROM golang:1.26-bookworm AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libczmq-dev pkg-config && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags "-s -w" -o /out/warmpath ./cmd/warmpath

FROM debian:bookworm-slim
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends libczmq4 ca-certificates && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 65532 warmpath
COPY --from=build /out/warmpath /usr/local/bin/warmpath
USER 65532
EXPOSE 9002 9090
ENTRYPOINT ["/usr/local/bin/warmpath"]
CMD ["serve", "--config", "/etc/warmpath/warmpath.yaml"]
