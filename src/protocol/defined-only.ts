/** `T` with each key whose value may be undefined made optional and never undefined. */
export type DefinedOnly<T> = {
  [K in keyof T as undefined extends T[K] ? never : K]: T[K];
} & {
  [K in keyof T as undefined extends T[K] ? K : never]?: Exclude<T[K], undefined>;
};

/**
 * `fields` without the keys whose value is undefined: for an object whose
 * reader tells a missing key from an undefined one. Proto3 JSON is such a
 * reader: protobuf-es's fromJson (and decodeJson) refuses a field whose
 * value is undefined ("expected string, got undefined") and takes a missing
 * one as unset. So are Object.keys and a spread over defaults. Where the
 * reader takes undefined as absent, write `k: v` instead.
 */
export function definedOnly<T extends object>(fields: T): DefinedOnly<T> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fields)) if (value !== undefined) out[key] = value;
  return out as DefinedOnly<T>;
}
