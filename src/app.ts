/**
 * buildApp(): the Fastify instance with every route, without listen(), so tests can inject(). This is the composition
 * root (DESIGN.md §1): each plugin is given exactly the fields its deps interface lists, built below one function each.
 */
import type { FastifyInstance } from 'fastify';
import { createTransport } from './http/transport.js';
import type { Logger } from 'pino';
import { makeServices, type AppLimits, type AppServices } from './context.js';
import type { Config } from './config/types.js';
import { ClientDirectory, type DocumentResolver } from './clients/directory.js';
import type { BodyBudget } from './http/body-budget.js';
import { createMetrics, type Metrics } from './http/metrics.js';
import { measuredStore } from './store/measured.js';
import type { LimiterLink } from './http/shared-limiter.js';
import { countFailure, type FailureLimits } from './http/failure-limit.js';
import { consentRoutes, type ConsentRouteDeps } from './login/consent.js';
import { devicePageRoutes, type DevicePageDeps } from './login/device-page.js';
import { federationRoutes, type FederationRouteDeps } from './login/federation.js';
import { loginRoutes, type LoginRouteDeps } from './login/routes.js';
import { authorizeRoutes, type AuthorizeRouteDeps } from './oauth/authorize.js';
import { deviceAuthorizationRoutes, type DeviceAuthorizationRouteDeps } from './oauth/device-authorization.js';
import type { FormEndpointDeps } from './oauth/form-endpoint.js';
import { healthRoutes } from './oauth/health.js';
import { introspectionRoutes, type IntrospectionRouteDeps } from './oauth/introspect.js';
import { logoutRoutes, type LogoutRouteDeps } from './oauth/logout.js';
import { registrationRoutes, type RegistrationRouteDeps } from './oauth/register.js';
import { revocationRoutes, type RevocationRouteDeps } from './oauth/revoke.js';
import { metadataRoutes, wellKnownAtRoot, type MetadataDocumentDeps } from './oauth/metadata.js';
import { parRoutes, type ParRouteDeps } from './oauth/par.js';
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
  /** How many workers serve with this one (DESIGN.md §11); 1 by default. */
  readonly workers?: number;
  /** Request bodies held while they arrive (http/body-budget.ts); its default bounds unless a test passes smaller. */
  readonly bodyBudget?: BodyBudget;
}

/** The app, and the shared services it was built with (tests read the limits and metrics in effect). */
export async function buildApp(options: BuildAppOptions): Promise<{ app: FastifyInstance; ctx: AppServices }> {
  const metrics = options.metrics ?? createMetrics({ processMetrics: false });
  const store = measuredStore(options.store, metrics.storeOperations);
  const clients = new ClientDirectory(options.config, store, options.documents);
  const services = makeServices(options.config, options.keys, clients, store, { now: options.now, limits: options.limits, metrics, limiterLink: options.limiterLink, workers: options.workers });
  const app = await createTransport({
    logger: options.logger ?? createLogger('silent'),
    baseUrl: options.config.baseUrl,
    basePath: options.config.basePath,
    trustedProxies: options.config.trustedProxies,
    ...(options.https !== undefined && { https: options.https }),
    metrics,
    isClientOrigin: (origin) => clients.isClientOrigin(origin),
    countFailure: (address, status) => countFailure(services.failures, services.inFlight, services.limits, address, status, services.now()),
    requestTimeoutMs: services.limits.requestTimeoutMs,
    addressConnections: services.limits.addressConnections,
    ...(options.bodyBudget !== undefined && { bodyBudget: options.bodyBudget }),
  });
  await registerRoutes(app, services, store);
  return { app, ctx: services };
}

/** Every plugin, each given the narrow part of the store and the services its deps interface names. */
async function registerRoutes(app: FastifyInstance, services: AppServices, store: Store): Promise<void> {
  const { basePath } = services.config;
  // RFC 8414 §3.1 copies of the metadata live outside the prefix.
  await app.register(wellKnownAtRoot({ ...metadataDocument(services), basePath }));
  await app.register(
    async (scoped) => {
      await scoped.register(metadataRoutes({ ...metadataDocument(services), keys: services.keys, jwksMaxAgeSeconds: services.jwksMaxAgeSeconds }));
      await scoped.register(healthRoutes({ store }));
      await scoped.register(authorizeRoutes(authorizeDeps(services, store)));
      await scoped.register(loginRoutes(loginDeps(services, store)));
      await scoped.register(tokenRoutes(tokenDeps(services, store)));
      await scoped.register(parRoutes(parDeps(services, store)));
      await scoped.register(userinfoRoutes(userinfoDeps(services, store)));
      await scoped.register(deviceAuthorizationRoutes(deviceAuthorizationDeps(services, store)));
      await scoped.register(devicePageRoutes(devicePageDeps(services, store)));
      await scoped.register(federationRoutes(federationDeps(services, store)));
      await scoped.register(consentRoutes(consentDeps(services, store)));
      await scoped.register(logoutRoutes(logoutDeps(services, store)));
      await scoped.register(revocationRoutes(revocationDeps(services, store)));
      await scoped.register(introspectionRoutes(introspectionDeps(services, store)));
      await scoped.register(registrationRoutes(registrationDeps(services, store)));
    },
    { prefix: basePath },
  );
}

/** How pages name a client to a person (DESIGN.md §3): a configured client's display_name, else its client_id. */
function clientTitle(services: AppServices): (clientId: string) => string {
  return (clientId) => services.config.clients.get(clientId)?.displayName ?? clientId;
}

/** DESIGN.md §7: the two limits on failed requests, out of the `limits` block. */
function failureLimits(services: AppServices): FailureLimits {
  const { clientFailures, addressFailures } = services.limits;
  return { clientFailures, addressFailures };
}

/** The front every form endpoint shares: the failure counter and its two limits (DESIGN.md §7), the clock. */
function formFront(services: AppServices): FormEndpointDeps {
  const { clients } = services;
  return {
    failures: services.failures,
    inFlight: services.inFlight,
    limits: failureLimits(services),
    now: services.now,
    fetchesToResolve: (clientId, withAssertion) => clients.fetchesToResolve(clientId, withAssertion),
    isKnownClient: (clientId) => clients.isKnownClient(clientId),
  };
}

function metadataDocument(services: AppServices): MetadataDocumentDeps {
  return { issuer: services.issuer, configuredClients: services.config.clients, dynamicClients: services.config.dynamicClients };
}

function authorizeDeps(services: AppServices, store: Store): AuthorizeRouteDeps {
  return {
    store,
    clients: services.clients,
    issuer: services.issuer,
    now: services.now,
    cookies: services.cookies,
    basePath: services.config.basePath,
    signInPage: services.signInPage,
    isKnownSubject: services.isKnownSubject,
    failures: services.failures,
    inFlight: services.inFlight,
    limits: failureLimits(services),
  };
}

function loginDeps(services: AppServices, store: Store): LoginRouteDeps {
  const { addressFailures, loginFailures, loginFailuresAny, loginWindowMs, passwordHashes, passwordWaitMs, passwordChecksWaiting } = services.limits;
  return {
    store,
    now: services.now,
    cookies: services.cookies,
    basePath: services.config.basePath,
    users: services.config.users,
    clientTitle: clientTitle(services),
    upstreams: [...services.config.federations.values()].map((upstream) => upstream.name),
    failures: services.failures,
    inFlight: services.inFlight,
    limits: { addressFailures, loginFailures, loginFailuresAny, loginWindowMs, passwordHashes, passwordWaitMs, passwordChecksWaiting },
    sessionLifetimeMs: services.sessionLifetimeMs,
    metricsRegistry: services.metrics.registry,
  };
}

function tokenDeps(services: AppServices, store: Store): TokenRouteDeps {
  return {
    store,
    ...formFront(services),
    clients: services.clients,
    issuer: services.issuer,
    keys: services.keys,
    signer: services.signer,
    tokenState: services.tokenState,
    verifiedAccessTokens: services.verifiedAccessTokens,
    isKnownSubject: services.isKnownSubject,
    metrics: services.metrics,
  };
}

function parDeps(services: AppServices, store: Store): ParRouteDeps {
  return { store, ...formFront(services), clients: services.clients, issuer: services.issuer };
}

function userinfoDeps(services: AppServices, store: Store): UserinfoRouteDeps {
  const { clients, issuer, keys, now, tokenState, failures, inFlight } = services;
  return { store, users: services.config.users, clients, issuer, keys, now, tokenState, failures, inFlight, limits: failureLimits(services) };
}

function deviceAuthorizationDeps(services: AppServices, store: Store): DeviceAuthorizationRouteDeps {
  return { store, ...formFront(services), clients: services.clients, issuer: services.issuer };
}

function devicePageDeps(services: AppServices, store: Store): DevicePageDeps {
  const { userCodeFailures, userCodeWindowMs } = services.limits;
  return {
    store,
    now: services.now,
    cookies: services.cookies,
    basePath: services.config.basePath,
    isKnownSubject: services.isKnownSubject,
    signInPage: services.signInPage,
    clientTitle: clientTitle(services),
    limits: { userCodeFailures, userCodeWindowMs, addressFailures: services.limits.addressFailures },
    failures: services.failures,
    inFlight: services.inFlight,
  };
}

function federationDeps(services: AppServices, store: Store): FederationRouteDeps {
  return {
    store,
    now: services.now,
    cookies: services.cookies,
    basePath: services.config.basePath,
    issuer: services.issuer,
    federations: services.config.federations,
    sessionLifetimeMs: services.sessionLifetimeMs,
    failures: services.failures,
    inFlight: services.inFlight,
    limits: failureLimits(services),
  };
}

function consentDeps(services: AppServices, store: Store): ConsentRouteDeps {
  const { clients, now, cookies, issuer, isKnownSubject, failures, inFlight } = services;
  return { store, clients, now, cookies, basePath: services.config.basePath, issuer, isKnownSubject, failures, inFlight, limits: failureLimits(services) };
}

function logoutDeps(services: AppServices, store: Store): LogoutRouteDeps {
  const { clients, keys, issuer, now, cookies, isKnownSubject } = services;
  return { store, clients, keys, issuer, now, cookies, basePath: services.config.basePath, isKnownSubject };
}

function revocationDeps(services: AppServices, store: Store): RevocationRouteDeps {
  return { store, ...formFront(services), clients: services.clients, issuer: services.issuer, keys: services.keys };
}

function introspectionDeps(services: AppServices, store: Store): IntrospectionRouteDeps {
  return {
    store,
    ...formFront(services),
    clients: services.clients,
    resourceServers: services.config.resourceServers,
    issuer: services.issuer,
    keys: services.keys,
    verifiedAccessTokens: services.verifiedAccessTokens,
    tokenState: services.tokenState,
    isKnownSubject: services.isKnownSubject,
  };
}

function registrationDeps(services: AppServices, store: Store): RegistrationRouteDeps {
  return { store, dynamicClients: services.config.dynamicClients, ...formFront(services) };
}
