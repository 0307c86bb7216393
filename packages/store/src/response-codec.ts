// Stored responses are encrypted at rest with AES-256-GCM. The key id is stored beside
// the ciphertext; any configured key decrypts, the first one encrypts (so rotation is:
// put the new key first, re-encrypt, then drop the old one). The row's scoped key is
// the associated data, so a ciphertext copied into another principal's (or service's) row
// fails to open.
import { createCipheriv, createDecipheriv, randomFillSync } from 'node:crypto';
import { StoredResponseUnreadableError } from './errors.js';

const IV_BYTES = 12;
const TAG_BYTES = 16;

export interface ResponseKey {
  id: string;
  key: Buffer;
}

export interface SealedBody {
  keyId: string;
  /** iv || tag || ciphertext */
  ciphertext: Buffer;
}

export interface RowIdentity {
  principalId: string;
  service: string;
  scope: string;
  key: string;
}

/**
 * The service that rows sealed before services existed belong to (migration 0016 gave them this
 * name). Its associated data is [principal, scope, key], as it was when they were sealed; every
 * other service's is [principal, scope, key, service]. The two forms never coincide, so a
 * ciphertext opens only in the row of the service it was sealed for.
 */
export const LEGACY_SERVICE = 'demo';

// Random IVs drawn from a buffer refilled 4 KiB at a time (as Node's randomUUID does): one
// getrandom call per 341 seals instead of one per seal, which was 4% of a request's CPU.
const ivPool = Buffer.alloc(IV_BYTES * 341);
let ivOffset = ivPool.length;

/** Writes the next random IV into `target` at 0 (a copy: the pool is overwritten on the next refill). */
function writeIv(target: Buffer): void {
  if (ivOffset + IV_BYTES > ivPool.length) {
    randomFillSync(ivPool);
    ivOffset = 0;
  }
  ivPool.copy(target, 0, ivOffset, ivOffset + IV_BYTES);
  ivOffset += IV_BYTES;
}

function associatedData(row: RowIdentity): Buffer {
  const fields = row.service === LEGACY_SERVICE ? [row.principalId, row.scope, row.key] : [row.principalId, row.scope, row.key, row.service];
  return Buffer.from(JSON.stringify(fields), 'utf8');
}

export class ResponseKeyRing {
  private readonly byId: Map<string, Buffer>;
  private readonly current: ResponseKey;

  constructor(keys: readonly ResponseKey[]) {
    const [first] = keys;
    if (!first) throw new Error('ResponseKeyRing needs at least one key');
    for (const { id, key } of keys) {
      if (key.length !== 32) throw new Error(`response key ${id} must be 32 bytes`);
    }
    this.current = first;
    this.byId = new Map(keys.map(({ id, key }) => [id, key]));
  }

  get currentKeyId(): string {
    return this.current.id;
  }

  seal(plaintext: Buffer, row: RowIdentity): SealedBody {
    // One buffer for the whole sealed body, the IV written into it first: GCM's ciphertext is as
    // long as the plaintext, so the layout is known before encrypting.
    const sealed = Buffer.allocUnsafe(IV_BYTES + TAG_BYTES + plaintext.length);
    writeIv(sealed);
    const cipher = createCipheriv('aes-256-gcm', this.current.key, sealed.subarray(0, IV_BYTES));
    cipher.setAAD(associatedData(row));
    const body = cipher.update(plaintext);
    const last = cipher.final();
    if (body.length + last.length !== plaintext.length) throw new Error('AES-256-GCM changed the length of a body');
    cipher.getAuthTag().copy(sealed, IV_BYTES);
    body.copy(sealed, IV_BYTES + TAG_BYTES);
    last.copy(sealed, IV_BYTES + TAG_BYTES + body.length);
    return { keyId: this.current.id, ciphertext: sealed };
  }

  open(sealed: SealedBody, row: RowIdentity): Buffer {
    const key = this.byId.get(sealed.keyId);
    if (!key) throw new StoredResponseUnreadableError(`no configured key has id "${sealed.keyId}"`);
    if (sealed.ciphertext.length < IV_BYTES + TAG_BYTES) throw new StoredResponseUnreadableError('ciphertext too short');
    const decipher = createDecipheriv('aes-256-gcm', key, sealed.ciphertext.subarray(0, IV_BYTES));
    decipher.setAAD(associatedData(row));
    decipher.setAuthTag(sealed.ciphertext.subarray(IV_BYTES, IV_BYTES + TAG_BYTES));
    try {
      return Buffer.concat([decipher.update(sealed.ciphertext.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]);
    } catch {
      throw new StoredResponseUnreadableError('authentication failed');
    }
  }
}
