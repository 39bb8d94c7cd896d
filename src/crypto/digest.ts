/** SHA-256 in one call: crypto.hash (Node 20.12+) makes no Hash object per digest, which /token pays for on every request. */
import { hash } from 'node:crypto';

export const sha256 = (data: string): Buffer => hash('sha256', data, 'buffer');
