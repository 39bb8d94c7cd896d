# Pinpoint demo configuration: what `npm start` runs. Check it with
#   npx pinpoint check --config config.example.hcl
# Relative paths below are resolved against the folder of this file. Before uncommenting an example
# that names a file (secret_file, jwks_file, token_file), create that file.

# The issuer: the URL clients and resource servers know this server by. No trailing slash;
# https unless the host is loopback (127.0.0.1, ::1, localhost). It may carry a path, e.g.
# "https://example.org/auth", and every endpoint is then served under /auth.
base_url = "http://127.0.0.1:8080"

# Address and port to listen on ("host:port", or "[::1]:8080" for IPv6). Default 127.0.0.1:8080.
listen = "127.0.0.1:8080"

# How long an access token is valid. Durations are Go-style (90s, 15m, 1h30m, 720h) plus d
# for days (30d). Default 1h.
access_token_lifetime = "1h"

# fatal, error, warn, info (default), debug, trace or silent. No level ever logs a token,
# code, secret or password.
log_level = "info"

# TLS. mode "off" (default): plain HTTP, for loopback; "proxy": a reverse proxy terminates
# TLS in front of Pinpoint; "terminate": Pinpoint serves HTTPS itself with these files.
tls {
  mode = "off"
  # cert_file = "tls/cert.pem"
  # key_file  = "tls/key.pem"
}

# Reverse proxies whose X-Forwarded-For and X-Forwarded-Proto are believed (addresses or CIDRs),
# in every tls mode. Default: none, so behind a proxy (mode "proxy") list it here, or every
# request seems to come from the proxy.
# trusted_proxies = ["127.0.0.1", "10.0.0.0/8"]

# Attempt limits; the values shown are the defaults. Failed requests count per address and per
# client per address, per minute; wrong passwords and user codes per 15 minutes.
# limits {
#   client_failures    = 300   # failed requests per client per address
#   address_failures   = 300   # failed requests per address
#   login_failures     = 10    # wrong passwords per user per address: then 429
#   login_failures_any = 100   # wrong passwords per user from all addresses: then slowed
#   user_code_failures = 20    # wrong device user codes per address
#   password_hashes    = 2     # password checks at once per worker (about 128 MiB each); more wait
#                              # at most 5 s, then 503 with Retry-After
#   address_connections = 1024 # connections one address may hold open at once, per worker
# }

# Worker processes serving the one listener (a number, or "auto" for every CPU this process may
# use). More than 1 needs the state block below. Default 1. `pinpoint reload` (or SIGHUP to the
# primary) replaces them one at a time with a re-read config, refusing no request.
# workers = 1

# Prometheus text at GET /metrics, on its own listener (never on the main one). Default: off.
# metrics {
#   listen = "127.0.0.1:9464"
# }

# Where keys, grants, refresh tokens and sessions live. Without this block everything is kept
# in memory and lost on restart. Give exactly one of:
#   path = SQLite database file (its folder is created when missing);
#   url  = PostgreSQL, for several Pinpoint instances sharing one database, with optional
#          schema = "public" (the default) and password_file = "secrets/db-password".
state {
  path = "data/pinpoint.db"
  # url           = "postgres://pinpoint@db.internal:5432/pinpoint"
  # schema        = "public"
  # password_file = "secrets/db-password"
}

# A local account for the sign-in page (repeatable; the label is the user name).
# password_hash comes from:  printf 'wonderland' | npx pinpoint hash-password
# The demo password of alice is "wonderland".
user "alice" {
  password_hash = "scrypt$N=131072,r=8,p=1$JzfutlZp5RIJB6-0mtON4A$glYlChpI7LD3Kt_QrGT8GhDYdSzxB3HpxhFQshUzLGs"
  email         = "alice@example.org"   # optional, for the email claim
  name          = "Alice Example"       # optional, for the name claim
}

# Sign-in through an upstream OpenID Connect provider (optional, repeatable):
# federation "campus" {
#   issuer        = "https://idp.example.org"      # https unless loopback
#   client_id     = "pinpoint"                     # Pinpoint's client_id at that provider
#   secret_file   = "secrets/campus"               # file holding the matching client secret
#   scopes        = ["openid", "email", "profile"] # the default; must contain openid
#   subject_claim = "sub"                          # optional: claim used as the subject
# }

# A client; the label is its client_id.
client "webapp" {
  # With secret_file the client is confidential and authenticates with HTTP Basic; without it,
  # public. The file holds the secret (one trailing newline ignored) and should be chmod 600.
  secret_file = "secrets/webapp.secret"

  # Exact redirect URIs (absolute, no fragment). A confidential client without any may only
  # use client_credentials.
  redirect_uris = ["http://127.0.0.1:9000/callback"]

  # The resource servers its tokens are for. A token holds them all in aud unless the client
  # names one with the resource parameter (RFC 8707). Only an absolute URI without "#" can be
  # named: "billing" (a logical name) and the "#v2" entry stay audience-only.
  audience = [
    "https://api.example.org/",
    "https://files.example.org",
    "billing",
    "https://docs.example.org/#v2",
  ]

  # With refresh_lifetime the client gets refresh tokens, each valid this long after issue.
  refresh_lifetime = "720h"

  # Scopes the client may ask for. Default ["openid", "profile", "email"].
  scopes = ["openid", "profile", "email", "ssh"]

  # Optional:
  # display_name              = "Demo web app"                # on sign-in pages; default the client_id
  # post_logout_redirect_uris = ["http://127.0.0.1:9000/"]    # exact URIs /logout may send back to
  # id_token_signing_alg      = "ES256"                       # default "RS256"
  # refresh_reuse_grace       = "10s"                         # a rotated refresh token stays usable
  #                                                           # this long (default "0s", at most "60s")
  # require_dpop              = true                          # /token refuses a request without a DPoP
  #                                                           # proof: every token is key-bound (RFC 9449)
  # require_par               = true                          # /authorize only with a request_uri from
  #                                                           # POST /par (RFC 9126)
}

# A device client (RFC 8628, e.g. a TV): always public, no secret_file, no redirect_uris.
client "tv" {
  device           = true
  audience         = ["https://api.example.org/"]
  refresh_lifetime = "720h"
}

# A client that authenticates with private_key_jwt (RFC 7523) instead of a secret: jwks_file holds
# its public keys only, as a JWK Set ({"keys": [...]}, a file of at most 64 KiB); no secret_file.
# client "partner" {
#   jwks_file = "keys/partner.jwks.json"
#   audience  = ["https://api.example.org/"]
#   scopes    = ["read"]              # what client_credentials may ask; default ["openid", "profile", "email"]
# }

# A resource server that calls another on a person's behalf (token exchange, RFC 8693): a
# confidential client (secret_file or jwks_file) whose token_exchange block lists its own address,
# the aud of the tokens it may exchange. Each subject_audience entry must be in the audience of
# some client (here webapp's) or of dynamic_clients, and nameable as resource; check refuses others.
# client "api-backend" {
#   secret_file = "secrets/api-backend.secret"
#   audience    = ["https://files.example.org"]        # the servers it may call
#   token_exchange {
#     subject_audience = ["https://api.example.org/"]  # tokens addressed to it
#   }
# }

# A resource server that may ask POST /introspect about tokens addressed to it (HTTP Basic, the
# label as user name). The label must be an audience entry that can be named as resource.
# resource_server "https://api.example.org/" {
#   secret_file = "secrets/api.secret"
# }

# Clients that are not in this file: MCP hosts and native apps, which register at POST /register
# (RFC 7591) or use the https URL of a client ID metadata document as client_id. Their tokens follow
# the resource rules with this audience. See the README's "Protect an MCP server".
# dynamic_clients {
#   audience            = ["https://mcp.example.org/mcp"]  # required: what their tokens may be for
#   metadata_documents  = true        # client_id may be an https URL of a metadata document
#   registration        = "open"      # "off" (default), "open", or "token" with token_file
#   # token_file        = "secrets/registration"
#   scopes              = ["openid", "profile", "mcp"]      # default ["openid", "profile", "email"]
#   default_scope       = "mcp"       # for a request without scope; default none (refused)
#   refresh_lifetime    = "720h"      # default none: no refresh tokens
#   refresh_reuse_grace = "10s"       # MCP hosts refresh in parallel: for 10 s, reusing a rotated token revokes nothing
#   # allow_private_addresses = true  # tests only: fetch metadata documents from loopback/private hosts (check warns)
# }
