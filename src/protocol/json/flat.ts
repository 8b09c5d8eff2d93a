import {
  fromJson,
  ScalarType,
  type DescField,
  type DescMessage,
  type JsonValue,
  type Message,
} from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { idAllowed, textAllowed, valueSurelyAllowed } from "../text-rules.js";
import { attachTransportFacts, transportFacts } from "../transport-facts.js";

/** Decodes one JSON object into a message, or undefined when it cannot be sure of the outcome. */
export type FlatDecoder = (json: Record<string, JsonValue>) => Message | undefined;

/**
 * How deep a google.protobuf.Value the flat decoder takes; deeper ones go through protobuf-es (its
 * own bound is 100).
 */
const maxValueDepth = 32;

const decoders = new WeakMap<DescMessage, FlatDecoder | null>();

/**
 * A decoder for flat request messages (the stream messages: string and int64
 * fields and google.protobuf.Value data) that reads the parsed JSON directly,
 * without protobuf-es reflection, and checks the text rules on the way
 * (text-rules.ts). It takes only what it is sure of — every key a field's
 * JSON name, strings as strings, int64 as safe integer numbers, Value fields
 * as JSON other than null whose text is allowed — and then builds the
 * message protobuf-es would, with the transport facts `textChecked` and
 * `plainValues` (transport-facts.ts). For anything else it returns undefined
 * and codec.ts decodes through protobuf-es and the text rules, which then accept or
 * refuse it with their own messages: so a line decodes, or is refused, the
 * same on both paths.
 *
 * A Value field is kept as the plain JSON sent (`plainValues`); reading the
 * field itself builds the google.protobuf.Value on first use. Undefined for a
 * schema with any other kind of field.
 */
export function flatDecoder(schema: DescMessage): FlatDecoder | undefined {
  let decoder = decoders.get(schema);
  if (decoder === undefined) {
    decoder = buildDecoder(schema) ?? null;
    decoders.set(schema, decoder);
  }
  return decoder ?? undefined;
}

type FieldKind = "string" | "int64" | "value";

function kindOf(field: DescField): FieldKind | undefined {
  if (field.oneof) return undefined;
  if (field.fieldKind === "scalar" && field.scalar === ScalarType.STRING) return "string";
  if (field.fieldKind === "scalar" && field.scalar === ScalarType.INT64) return "int64";
  if (field.fieldKind === "message" && field.message.typeName === ValueSchema.typeName)
    return "value";
  return undefined;
}

function buildDecoder(schema: DescMessage): FlatDecoder | undefined {
  const fields = new Map<string, { readonly field: DescField; readonly kind: FieldKind }>();
  for (const field of schema.fields) {
    const kind = kindOf(field);
    if (!kind) return undefined;
    fields.set(field.jsonName, { field, kind });
  }
  const valueFields = schema.fields.filter((f) => kindOf(f) === "value").map((f) => f.localName);
  // The message's prototype: each Value field is built from its plain JSON when first read.
  const proto: object = {};
  for (const name of valueFields) {
    Object.defineProperty(proto, name, {
      enumerable: true,
      configurable: true,
      get(this: object) {
        const json = transportFacts(this).plainValues![name];
        const value = json === undefined ? undefined : fromJson(ValueSchema, json);
        Object.defineProperty(this, name, {
          value,
          writable: true,
          enumerable: true,
          configurable: true,
        });
        return value;
      },
    });
  }
  const defaults: Record<string, unknown> = { $typeName: schema.typeName };
  for (const field of schema.fields)
    if (fields.get(field.jsonName)!.kind !== "value")
      defaults[field.localName] = fields.get(field.jsonName)!.kind === "int64" ? 0n : "";
  const lastIds: Record<string, string> = {}; // ids repeat line after line: check each new one once

  return (json) => {
    const message: Record<string | symbol, unknown> = Object.assign(
      Object.create(proto) as object,
      defaults,
    );
    const plain: Record<string, JsonValue | undefined> = {};
    for (const key in json) {
      const entry = fields.get(key);
      if (!entry) return undefined; // an unknown key or a proto name: protobuf-es decides
      const value = json[key]!;
      switch (entry.kind) {
        case "string":
          if (typeof value !== "string" || !textAllowed(value)) return undefined;
          if (lastIds[key] !== value) {
            if (!idAllowed(entry.field, value)) return undefined;
            lastIds[key] = value;
          }
          message[entry.field.localName] = value;
          break;
        case "int64":
          if (typeof value !== "number" || !Number.isSafeInteger(value)) return undefined;
          message[entry.field.localName] = BigInt(value);
          break;
        case "value":
          if (value === null || !valueSurelyAllowed(value, maxValueDepth)) return undefined;
          plain[entry.field.localName] = value;
          break;
      }
    }
    attachTransportFacts(message, { plainValues: plain, textChecked: true });
    return message as unknown as Message;
  };
}
