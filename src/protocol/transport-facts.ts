import type { JsonValue } from "@bufbuild/protobuf";

/**
 * What a transport's decoder learned about a request message (or a stream of them) beyond its
 * fields, carried on the object itself so handlers keep their generated signatures. Every fact is
 * optional: a message from a generated client has none, and code that reads one must also work
 * without it (the fact only saves work or names a position).
 */
export interface TransportFacts {
  /** The NDJSON line the message was read from, counted from 1 (REST streams). */
  readonly line?: number;
  /**
   * The plain JSON sent for each google.protobuf.Value field, by local name; a field absent from
   * the record was absent from the message (the REST flat decoder).
   */
  readonly plainValues?: Readonly<Record<string, JsonValue | undefined>>;
  /** The decoder checked the text rules on every field: checkRequestText need not walk it again. */
  readonly textChecked?: true;
  /** Reads a stream of messages a batch at a time, never an empty batch (streams/batches.ts). */
  readonly batches?: () => AsyncIterator<readonly unknown[]>;
}

/**
 * One symbol property, not a WeakMap: a weak collection of every NDJSON line costs the garbage
 * collector more than a property on an object that is garbage soon anyway.
 */
const facts = Symbol("transport facts");

const none: TransportFacts = Object.freeze({});

/** The transport facts of `message`; an empty record when its decoder attached none. */
export function transportFacts(message: object): TransportFacts {
  return (message as { [facts]?: TransportFacts })[facts] ?? none;
}

/**
 * Adds `added` to the transport facts of `message`. The record is kept as given when `message`
 * had none: pass a fresh object.
 */
export function attachTransportFacts(message: object, added: TransportFacts): void {
  const holder = message as { [facts]?: TransportFacts };
  const known = holder[facts];
  holder[facts] = known ? Object.assign(known, added) : added;
}
