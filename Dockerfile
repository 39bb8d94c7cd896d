# Pinpoint on the Node.js 24 LTS line (supported: Node 20.12+, 22 and 24; see README "Supported Node.js versions").
# Pin the base image by digest for reproducible builds: resolve the tag once with
#   docker buildx imagetools inspect node:24-bookworm-slim --format '{{json .Manifest.Digest}}'
# and build with --build-arg NODE_IMAGE=node:24-bookworm-slim@sha256:<that digest>; renew it when Node ships a fix.
ARG NODE_IMAGE=node:24-bookworm-slim

# Build stage: compile TypeScript and the native SQLite addon.
FROM ${NODE_IMAGE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json ./
COPY src ./src
RUN npm ci && npm prune --omit=dev

# Runtime stage: only the compiled code and production dependencies, as a non-root user.
FROM ${NODE_IMAGE}
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
RUN mkdir -p /var/lib/pinpoint /etc/pinpoint && chown node:node /var/lib/pinpoint
# The config goes in /etc/pinpoint and its relative paths resolve there: mount the secrets folder as
# /etc/pinpoint/secrets. `node` is uid 1000, so 0600 secret files must be owned by uid 1000 (README "Operations").
USER node
VOLUME ["/var/lib/pinpoint"]
EXPOSE 8080
# Liveness on /healthz with Node itself (the slim image has no curl); assumes `listen` on port 8080 in the container.
HEALTHCHECK --interval=30s --timeout=3s --start-period=10s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:8080/healthz').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# A 32 MiB young generation semi-space: fewer scavenges under load (README "Operations", bench/RESULTS.md).
ENTRYPOINT ["node", "--max-semi-space-size=32", "/app/dist/cli.js"]
CMD ["serve", "--config", "/etc/pinpoint/config.hcl"]
