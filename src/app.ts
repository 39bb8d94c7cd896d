/** buildApp(): the Fastify instance with every route, without listen(), so tests can inject(). */
import type { FastifyInstance } from 'fastify';
import { createTransport } from './http/transport.js';
import type { Logger } from 'pino';
import { makeContext, type AppContext, type AppLimits } from './context.js';
import type { Config } from './config/types.js';
import { ClientDirectory, type DocumentResolver } from './clients/directory.js';
import { createMetrics, type Metrics } from './http/metrics.js';
import { measuredStore } from './store/measured.js';
import type { LimiterLink } from './http/shared-limiter.js';
import { countFailure, type FailureLimits } from './http/failure-limit.js';
import { consentRoutes } from './login/consent.js';
import { devicePageRoutes } from './login/device-page.js';
import { federationRoutes } from './login/federation.js';
import { loginRoutes } from './login/routes.js';
import { authorizeRoutes, type AuthorizeRouteDeps } from './oauth/authorize.js';
import { deviceAuthorizationRoutes, type DeviceAuthorizationRouteDeps } from './oauth/device-authorization.js';
import { healthRoutes } from './oauth/health.js';
import { introspectionRoutes, type IntrospectionRouteDeps } from './oauth/introspect.js';
import { logoutRoutes } from './oauth/logout.js';
import { registrationRoutes } from './oauth/register.js';
import { revocationRoutes, type RevocationRouteDeps } from './oauth/revoke.js';
import { metadataRoutes, wellKnownAtRoot, type MetadataDocumentDeps } from './oauth/metadata.js';
import { parRoutes, type ParRouteDeps } from './oauth/par.js';
import type { FormEndpointDeps } from './oauth/form-endpoint.js';
import { tokenRoutes, type TokenRouteDeps } from './oauth/token.js';
import { userinfoRoutes, type UserinfoRouteDeps } from './oauth/userinfo.js';
import type { KeyRing, SigningKeys } from './crypto/keys.js';
import type { Store } from './store/types.js';
import { createLogger } from './log.js';

export interface BuildAppOptions {
  readonly config: Config;
  readonly store: Store;
  readonly keys: SigningKeys | KeyRing;
  readonly logger?: Logger;
  readonly now?: () => number;
  readonly limits?: Partial<AppLimits>;
  readonly https?: { key: Buffer; cert: Buffer };
  /** The registry the metrics listener serves; a private one when absent. */
  readonly metrics?: Metrics;
  /** Fetches client ID metadata documents (DESIGN.md §9); none: such client_ids are unknown. */
  readonly documents?: DocumentResolver;
  /** How this worker's failure limiter reaches the others (DESIGN.md §11); none in a single process. */
  readonly limiterLink?: LimiterLink;
}

export async function buildApp(options: BuildAppOptions): Promise<{ app: FastifyInstance; ctx: AppContext }> {
  const metrics = options.metrics ?? createMetrics({ processMetrics: false });
  const store = measuredStore(options.store, metrics.storeOperations);
  const clients = new ClientDirectory(options.config, store, options.documents);
  const ctx = makeContext(options.config, options.keys, clients, store, { now: options.now, limits: options.limits, metrics, limiterLink: options.limiterLink });
  const app = await createTransport({
    logger: options.logger ?? createLogger('silent'),
    baseUrl: options.config.baseUrl,
    basePath: options.config.basePath,
    trustedProxies: options.config.trustedProxies,
    ...(options.https !== undefined && { https: options.https }),
    metrics,
    isClientOrigin: (origin) => clients.isClientOrigin(origin),
    countFailure: (address, status) => countFailure(ctx.failures, address, undefined, status, ctx.now()),
  });

  // RFC 8414 §3.1 copies of the metadata live outside the prefix.
  await app.register(wellKnownAtRoot({ ...metadataDocument(ctx), basePath: ctx.config.basePath }));
  await app.register(
    async (scoped) => {
      await scoped.register(metadataRoutes({ ...metadataDocument(ctx), keys: () => ctx.keys, jwksMaxAgeSeconds: ctx.jwksMaxAgeSeconds }));
      // Each plugin gets the narrow part of the store it uses (its parameter type says which).
      await scoped.register(healthRoutes({ store }));
      await scoped.register(authorizeRoutes(authorizeDeps(ctx, store)));
      await scoped.register(
        loginRoutes({
          store,
          now: ctx.now,
          cookies: ctx.cookies,
          basePath: ctx.config.basePath,
          users: ctx.config.users,
          upstreams: [...ctx.config.federations.values()].map((upstream) => upstream.name),
          failures: ctx.failures,
          limits: ctx.limits,
          sessionLifetimeMs: ctx.sessionLifetimeMs,
          metricsRegistry: ctx.metrics.registry,
        }),
      );
      await scoped.register(tokenRoutes(tokenDeps(ctx, store)));
      await scoped.register(parRoutes(parDeps(ctx, store)));
      await scoped.register(userinfoRoutes(userinfoDeps(ctx, store)));
      await scoped.register(deviceAuthorizationRoutes(deviceAuthorizationDeps(ctx, store)));
      await scoped.register(
        devicePageRoutes({
          store,
          now: ctx.now,
          cookies: ctx.cookies,
          basePath: ctx.config.basePath,
          isKnownSubject: ctx.isKnownSubject,
          signInPage: ctx.signInPage,
          limits: ctx.limits,
        }),
      );
      await scoped.register(
        federationRoutes({
          store,
          now: ctx.now,
          cookies: ctx.cookies,
          basePath: ctx.config.basePath,
          issuer: ctx.issuer,
          federations: ctx.config.federations,
          sessionLifetimeMs: ctx.sessionLifetimeMs,
        }),
      );
      await scoped.register(
        consentRoutes({
          store,
          clients: ctx.clients,
          now: ctx.now,
          cookies: ctx.cookies,
          basePath: ctx.config.basePath,
          issuer: ctx.issuer,
          isKnownSubject: ctx.isKnownSubject,
        }),
      );
      await scoped.register(
        logoutRoutes({
          store,
          clients: ctx.clients,
          keys: () => ctx.keys,
          issuer: ctx.issuer,
          now: ctx.now,
          cookies: ctx.cookies,
          basePath: ctx.config.basePath,
          isKnownSubject: ctx.isKnownSubject,
        }),
      );
      await scoped.register(revocationRoutes(revocationDeps(ctx, store)));
      await scoped.register(introspectionRoutes(introspectionDeps(ctx, store)));
      await scoped.register(registrationRoutes({ store, dynamicClients: ctx.config.dynamicClients, ...formFront(ctx) }));
    },
    { prefix: ctx.config.basePath },
  );
  return { app, ctx };
}

function tokenDeps(ctx: AppContext, store: Store): TokenRouteDeps {
  return {
    store,
    ...formFront(ctx),
    clients: ctx.clients,
    issuer: ctx.issuer,
    keys: () => ctx.keys,
    signer: ctx.signer,
    tokenState: ctx.tokenState,
    verifiedAccessTokens: ctx.verifiedAccessTokens,
    isKnownSubject: ctx.isKnownSubject,
    metrics: ctx.metrics,
  };
}

function deviceAuthorizationDeps(ctx: AppContext, store: Store): DeviceAuthorizationRouteDeps {
  return { store, ...formFront(ctx), clients: ctx.clients, issuer: ctx.issuer };
}

function parDeps(ctx: AppContext, store: Store): ParRouteDeps {
  return { store, ...formFront(ctx), clients: ctx.clients, issuer: ctx.issuer };
}

function revocationDeps(ctx: AppContext, store: Store): RevocationRouteDeps {
  return { store, ...formFront(ctx), clients: ctx.clients, issuer: ctx.issuer, keys: () => ctx.keys };
}

function introspectionDeps(ctx: AppContext, store: Store): IntrospectionRouteDeps {
  return {
    store,
    ...formFront(ctx),
    clients: ctx.clients,
    resourceServers: ctx.config.resourceServers,
    issuer: ctx.issuer,
    keys: () => ctx.keys,
    verifiedAccessTokens: ctx.verifiedAccessTokens,
    tokenState: ctx.tokenState,
    isKnownSubject: ctx.isKnownSubject,
  };
}

/** The front every form endpoint shares: the failure counter and its two limits (DESIGN.md §7), the clock. */
function formFront(ctx: AppContext): FormEndpointDeps {
  return { failures: ctx.failures, limits: failureLimits(ctx), now: ctx.now };
}

/** DESIGN.md §7: the two limits on failed requests, out of the `limits` block. */
function failureLimits(ctx: AppContext): FailureLimits {
  const { clientFailures, addressFailures } = ctx.limits;
  return { clientFailures, addressFailures };
}

function userinfoDeps(ctx: AppContext, store: Store): UserinfoRouteDeps {
  return { store, users: ctx.config.users, clients: ctx.clients, issuer: ctx.issuer, keys: () => ctx.keys, now: ctx.now, tokenState: ctx.tokenState };
}

function metadataDocument(ctx: AppContext): MetadataDocumentDeps {
  return { issuer: ctx.issuer, configuredClients: ctx.config.clients, dynamicClients: ctx.config.dynamicClients };
}

function authorizeDeps(ctx: AppContext, store: Store): AuthorizeRouteDeps {
  return {
    store,
    clients: ctx.clients,
    issuer: ctx.issuer,
    now: ctx.now,
    cookies: ctx.cookies,
    basePath: ctx.config.basePath,
    signInPage: ctx.signInPage,
    isKnownSubject: ctx.isKnownSubject,
    failures: ctx.failures,
    limits: failureLimits(ctx),
  };
}
