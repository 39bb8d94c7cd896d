# Build stage: compile TypeScript and the native SQLite addon.
FROM node:20-bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json ./
COPY src ./src
RUN npm ci && npm prune --omit=dev

# Runtime stage: only the compiled code and production dependencies, as a non-root user.
FROM node:20-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
RUN mkdir -p /var/lib/pinpoint /etc/pinpoint && chown node:node /var/lib/pinpoint
USER node
VOLUME ["/var/lib/pinpoint"]
EXPOSE 8080
# A 32 MiB young generation semi-space: fewer scavenges under load (README "Operations", bench/RESULTS.md).
ENTRYPOINT ["node", "--max-semi-space-size=32", "/app/dist/cli.js"]
CMD ["serve", "--config", "/etc/pinpoint/config.hcl"]
