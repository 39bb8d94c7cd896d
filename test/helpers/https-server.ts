/**
 * An HTTPS server on 127.0.0.1 with a self-signed certificate of its own, for tests where Pinpoint fetches from the
 * network (client ID metadata documents, key sets): the tests trust `cert`, and `close` removes everything.
 */
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import type { RequestListener } from 'node:http';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

/** A self-signed P-256 certificate for `altNames` (it is its own CA), written into `folder`. */
export async function makeCertificate(folder: string, altNames = 'IP:127.0.0.1'): Promise<{ certFile: string; cert: Buffer; key: Buffer }> {
  const certFile = join(folder, 'ca.pem');
  const keyFile = join(folder, 'key.pem');
  await promisify(execFile)('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-days', '1',
    '-subj', '/CN=127.0.0.1', '-addext', `subjectAltName=${altNames}`, '-keyout', keyFile, '-out', certFile], { timeout: 10_000 });
  return { certFile, cert: await readFile(certFile), key: await readFile(keyFile) };
}

export interface HttpsTestServer {
  readonly server: Server;
  /** `https://127.0.0.1:<port>` */
  readonly origin: string;
  /** The certificate to trust. */
  readonly cert: Buffer;
  /** Closes every connection and the server, and removes the certificate's folder. */
  close(): Promise<void>;
}

/** Starts `handler` on a free loopback port over HTTPS. */
export async function startHttpsServer(handler: RequestListener, altNames?: string): Promise<HttpsTestServer> {
  const folder = await mkdtemp(join(tmpdir(), 'pinpoint-https-'));
  const { cert, key } = await makeCertificate(folder, altNames);
  const server = createServer({ key, cert }, handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    server,
    origin: `https://127.0.0.1:${(server.address() as AddressInfo).port}`,
    cert,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
      await rm(folder, { recursive: true, force: true });
    },
  };
}
