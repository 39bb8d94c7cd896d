/** Raw bytes over a real socket, for what Node's HTTP parser and timeouts see before Fastify does. */
import { connect } from 'node:net';

/** Writes `bytes` on one keep-alive connection and collects everything until the server closes it; a reset rejects. */
export function exchange(port: number, bytes: Buffer | string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(8000, () => reject(new Error('the server neither answered nor closed')));
    socket.on('data', (chunk) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('end', () => {
      socket.end();
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
    socket.write(bytes);
  });
}
