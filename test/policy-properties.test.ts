/** Invariants of the resource policy (STYLE.md: aud within the audience, duplicates change nothing, pure decisions). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import fc from 'fast-check';

import { OAuthError } from '../src/policy/oauth-error.js';
import {
  PROVIDER_SCOPES,
  decideAuthorizeResources,
  decideTokenAudience,
  type Audience,
  type GrantType,
  type ResourceClient,
} from '../src/policy/resource.js';
import type { Decision } from '../src/policy/decision.js';

// A fixed seed keeps CI deterministic; PINPOINT_FC_SEED explores other seeds locally.
const seed = process.env.PINPOINT_FC_SEED === undefined ? 8707 : Number(process.env.PINPOINT_FC_SEED);
fc.configureGlobal({ numRuns: 500, seed });

const ISSUER = 'https://auth.example.org';

const ENTRY_POOL: readonly string[] = [
  'https://api.example.org/',
  'https://files.example.org',
  'https://reports.example.org/q?tenant=7',
  'urn:example:ledger',
  'billing',
  'https://docs.example.org/#v2',
  ISSUER,
];
/** The pool entries that are absolute URIs without a fragment, written out rather than computed by the module under test. */
const NAMEABLE_ENTRIES: readonly string[] = [
  'https://api.example.org/',
  'https://files.example.org',
  'https://reports.example.org/q?tenant=7',
  'urn:example:ledger',
  ISSUER,
];
const ORDINARY_SCOPES: readonly string[] = ['openid', 'profile', 'email', 'offline_access'];
const GRANT_TYPES: readonly GrantType[] = ['authorization_code', 'refresh_token', 'client_credentials', 'device_code'];

const toggleTrailingSlash = (value: string): string => (value.endsWith('/') ? value.slice(0, -1) : `${value}/`);
const withoutScheme = (value: string): string => value.replace(/^[A-Za-z][A-Za-z0-9+.-]*:(\/\/)?/, '');

/** Near-misses of an audience entry: each is another resource by DESIGN.md §5 (no normalisation). */
const nearMisses = (entry: string): string[] => [
  toggleTrailingSlash(entry),
  entry.toUpperCase(),
  `${entry}#frag`,
  withoutScheme(entry),
  `${entry}?x=1`,
  ` ${entry}`,
];

const clientArb: fc.Arbitrary<ResourceClient> = fc
  .shuffledSubarray([...ENTRY_POOL], { minLength: 1 })
  .map((audience) => ({ clientId: 'client', audience }));

// Provider scopes in about a third of the cases, so the audience rules get most of the runs.
const scopeArb: fc.Arbitrary<string[]> = fc.oneof(
  { weight: 2, arbitrary: fc.shuffledSubarray([...ORDINARY_SCOPES]) },
  { weight: 1, arbitrary: fc.shuffledSubarray([...ORDINARY_SCOPES, ...PROVIDER_SCOPES]) },
);

/** Resource values for a client: its own entries, near-misses of every pooled entry, the issuer, empty, random text. */
const resourceArb = (client: ResourceClient): fc.Arbitrary<string> =>
  fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...client.audience) },
    { weight: 3, arbitrary: fc.constantFrom(...ENTRY_POOL.flatMap(nearMisses)) },
    { weight: 1, arbitrary: fc.constantFrom(ISSUER, '', `${ISSUER}/`) },
    { weight: 1, arbitrary: fc.string({ maxLength: 12 }) },
  );

const resourcesArb = (client: ResourceClient, maxLength: number): fc.Arbitrary<string[]> =>
  fc.array(resourceArb(client), { maxLength });

interface AuthorizeCase {
  readonly client: ResourceClient;
  readonly scope: string[];
  readonly resources: string[];
}

const authorizeCaseArb: fc.Arbitrary<AuthorizeCase> = clientArb.chain((client) =>
  fc.record({ client: fc.constant(client), scope: scopeArb, resources: resourcesArb(client, 6) }),
);

interface TokenCase {
  readonly grantType: GrantType;
  readonly client: ResourceClient;
  readonly grantScope: string[];
  readonly tokenScope: string[];
  readonly grantResources: string[];
  readonly requested: string[];
}

/** A /token request over a grant the policy itself could have made (resources from decideAuthorizeResources, token scope within the grant's). */
const tokenCaseArb: fc.Arbitrary<TokenCase> = authorizeCaseArb.chain(({ client, scope, resources }) => {
  // Mostly a grant that named some of the client's nameable entries (or the issuer), so the grant bound is exercised.
  const nameable = [...client.audience.filter((entry) => NAMEABLE_ENTRIES.includes(entry)), ISSUER];
  return fc
    .record({
      grantType: fc.oneof(
        { weight: 3, arbitrary: fc.constantFrom<GrantType>('authorization_code', 'refresh_token') },
        { weight: 1, arbitrary: fc.constantFrom(...GRANT_TYPES) },
      ),
      authorizeResources: fc.oneof(
        { weight: 3, arbitrary: fc.shuffledSubarray(nameable) },
        { weight: 1, arbitrary: fc.constant(resources) },
      ),
      tokenScope: fc.subarray(scope),
    })
    .chain(({ grantType, authorizeResources, tokenScope }) => {
      const authorized = decideAuthorizeResources({ client, issuer: ISSUER, scope, resources: authorizeResources });
      const fromAuthorize = grantType === 'authorization_code' || grantType === 'refresh_token';
      const grantResources = fromAuthorize && authorized.ok ? authorized.value : [];
      const one = fc.oneof(resourceArb(client), fc.constantFrom(...nameable));
      return fc
        .oneof(
          { weight: 1, arbitrary: fc.constant<string[]>([]) },
          { weight: 3, arbitrary: one.map((value) => [value]) },
          { weight: 1, arbitrary: fc.array(one, { minLength: 2, maxLength: 3 }) },
        )
        .map((requested) => ({
          grantType,
          client,
          grantScope: scope,
          tokenScope: grantType === 'refresh_token' ? tokenScope : scope,
          grantResources,
          requested,
        }));
    });
});

const authorize = (c: AuthorizeCase): Decision<string[]> =>
  decideAuthorizeResources({ client: c.client, issuer: ISSUER, scope: c.scope, resources: c.resources });

const tokenAudience = (c: TokenCase): Decision<Audience> =>
  decideTokenAudience({
    grantType: c.grantType,
    client: c.client,
    issuer: ISSUER,
    grantScope: c.grantScope,
    tokenScope: c.tokenScope,
    grantResources: c.grantResources,
    requested: c.requested,
  });

const hasProviderScope = (...scopes: readonly (readonly string[])[]): boolean =>
  scopes.some((scope) => scope.some((value) => PROVIDER_SCOPES.includes(value)));

const audValues = (aud: Audience): readonly string[] => (typeof aud === 'string' ? [aud] : aud);

/** Reference first-appearance order, written independently of the module. */
function firstAppearanceOrder(values: readonly string[]): string[] {
  const seen: string[] = [];
  for (const value of values) if (!seen.includes(value)) seen.push(value);
  return seen;
}

/** Every exact text DESIGN.md §5 allows for a refusal of these values and scopes; /authorize checks with the first text only. */
function allowedRefusals(where: '/authorize' | '/token', values: readonly string[], scopes: readonly string[]): Set<string> {
  const texts = new Set<string>();
  if (where === '/token') {
    texts.add('invalid_target resource indicators are taken with the authorization_code and refresh_token grants');
    texts.add('invalid_request resource appears more than once');
  }
  for (const value of values) {
    texts.add(`invalid_target resource "${value}" is not one this client may ask a token for`);
    if (where === '/token') texts.add(`invalid_target resource "${value}" was not part of the authorization`);
    for (const scope of scopes) {
      if (PROVIDER_SCOPES.includes(scope)) {
        texts.add(`invalid_target resource "${value}" cannot be named with scope "${scope}": its tokens are for the provider alone`);
      }
    }
  }
  return texts;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const key of Reflect.ownKeys(value)) deepFreeze((value as Record<PropertyKey, unknown>)[key]);
  }
  return value;
}

describe('resource policy invariants', () => {
  test('(1) an accepted aud is within the client audience, or exactly the issuer with a provider scope', () => {
    fc.assert(
      fc.property(authorizeCaseArb, (c) => {
        const decision = authorize(c);
        if (!decision.ok) return;
        if (hasProviderScope(c.scope)) {
          for (const value of decision.value) assert.equal(value, ISSUER);
        } else {
          for (const value of decision.value) assert.ok(c.client.audience.includes(value), `${value} is not an audience entry`);
        }
      }),
    );
    fc.assert(
      fc.property(tokenCaseArb, (c) => {
        const decision = tokenAudience(c);
        if (!decision.ok) return;
        if (hasProviderScope(c.grantScope, c.tokenScope)) {
          assert.equal(decision.value, ISSUER);
        } else {
          for (const value of audValues(decision.value)) assert.ok(c.client.audience.includes(value), `${value} is not an audience entry`);
          if (Array.isArray(decision.value)) assert.notEqual(decision.value.length, 1, 'a single value is a string aud');
        }
      }),
    );
  });

  test('(2) at /authorize, permuting or duplicating resources never changes the outcome; accepted = first appearances', () => {
    const variantArb = authorizeCaseArb.chain((c) =>
      fc.record({
        base: fc.constant(c),
        shuffled: fc.shuffledSubarray(c.resources, { minLength: c.resources.length, maxLength: c.resources.length }),
        extra: c.resources.length === 0 ? fc.constant<string[]>([]) : fc.array(fc.constantFrom(...c.resources), { maxLength: 6 }),
        insertAt: fc.array(fc.nat(), { minLength: 6, maxLength: 6 }),
      }),
    );
    fc.assert(
      fc.property(variantArb, ({ base, shuffled, extra, insertAt }) => {
        const duplicated = [...shuffled];
        extra.forEach((value, index) => duplicated.splice((insertAt[index] ?? 0) % (duplicated.length + 1), 0, value));

        const original = authorize(base);
        for (const resources of [shuffled, duplicated]) {
          const decision = authorize({ ...base, resources });
          assert.equal(decision.ok, original.ok, `outcome changed for ${JSON.stringify(resources)}`);
          if (decision.ok) assert.deepEqual(decision.value, firstAppearanceOrder(resources));
        }
        if (original.ok) assert.deepEqual(original.value, firstAppearanceOrder(base.resources));
      }),
    );
  });

  test('(3) decisions are pure: equal inputs give equal outputs and inputs are never mutated', () => {
    fc.assert(
      fc.property(authorizeCaseArb, (c) => {
        const input = { client: c.client, issuer: ISSUER, scope: c.scope, resources: c.resources };
        const snapshot = structuredClone(input);
        deepFreeze(input);
        const first = decideAuthorizeResources(input);
        const second = decideAuthorizeResources(input);
        assert.deepEqual(first, second);
        assert.deepEqual(input, snapshot);
        if (first.ok && second.ok) assert.notEqual(first.value, input.resources, 'the accepted list is a new array');
      }),
    );
    fc.assert(
      fc.property(tokenCaseArb, (c) => {
        const input = { ...c, issuer: ISSUER };
        const snapshot = structuredClone(input);
        deepFreeze(input);
        const first = decideTokenAudience(input);
        const second = decideTokenAudience(input);
        assert.deepEqual(first, second);
        assert.deepEqual(input, snapshot);
      }),
    );
  });

  test('(4) a value accepted at /token is one of the grant\'s resources when the grant has resources', () => {
    fc.assert(
      fc.property(tokenCaseArb, (c) => {
        const decision = tokenAudience(c);
        if (!decision.ok || c.grantResources.length === 0) return;
        const named = c.requested[0];
        if (named !== undefined) assert.ok(c.grantResources.includes(named), `${named} is outside the grant`);
        for (const value of audValues(decision.value)) assert.ok(c.grantResources.includes(value), `${value} is outside the grant`);
      }),
    );
  });

  test('(5) every refusal is an OAuthError with invalid_target or invalid_request and one of the exact texts', () => {
    const check = (where: '/authorize' | '/token', decision: Decision<unknown>, values: readonly string[], scopes: readonly string[]): void => {
      if (decision.ok) return;
      assert.ok(decision.error instanceof OAuthError, 'a refusal is an OAuthError');
      assert.ok(['invalid_target', 'invalid_request'].includes(decision.error.code), decision.error.code);
      assert.equal(decision.error.status, 400);
      const text = `${decision.error.code} ${decision.error.description}`;
      assert.ok(allowedRefusals(where, values, scopes).has(text), `unexpected refusal: ${text}`);
    };
    fc.assert(fc.property(authorizeCaseArb, (c) => check('/authorize', authorize(c), c.resources, c.scope)));
    fc.assert(fc.property(tokenCaseArb, (c) => check('/token', tokenAudience(c), c.requested, [...c.tokenScope, ...c.grantScope])));
  });

  test('(6) a named value is accepted only if it is an absolute URI without fragment equal to an audience entry, or the issuer with a provider scope', () => {
    const acceptable = (value: string, client: ResourceClient, scopes: readonly string[]): boolean =>
      hasProviderScope(scopes) ? value === ISSUER : /^[A-Za-z][A-Za-z0-9+.-]*:/.test(value) && !value.includes('#') && client.audience.includes(value);
    fc.assert(
      fc.property(authorizeCaseArb, (c) => {
        const decision = authorize(c);
        assert.equal(decision.ok, c.resources.every((value) => acceptable(value, c.client, c.scope)));
      }),
    );
    fc.assert(
      fc.property(tokenCaseArb, (c) => {
        const decision = tokenAudience(c);
        const named = c.requested[0];
        if (decision.ok && named !== undefined) {
          assert.ok(acceptable(named, c.client, [...c.grantScope, ...c.tokenScope]), `${JSON.stringify(named)} was accepted`);
          assert.equal(decision.value, named, 'aud is the named resource, exactly as sent');
        }
      }),
    );
  });
});
