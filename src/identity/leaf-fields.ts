/**
 * The few fields of a client certificate the policy needs and node:crypto
 * does not expose (the serial's DER bytes, URI SANs, the key-usage bits),
 * read straight from the DER.
 *
 * Why not @peculiar/x509 here: parsing a certificate with it, and above all
 * `getExtensions()`, cost ~1.5 ms of CPU per new connection (the whole tree
 * built by asn1js, each extension class made through a DI container); this
 * reads only the path to the extensions, in microseconds. It runs on
 * certificates that are not yet trusted, so every length is checked against
 * its enclosing element and anything malformed throws; the caller refuses
 * the certificate with that message.
 */

/** What `readLeafFields` finds in a certificate. */
export interface LeafFields {
  /**
   * The serial as lower-case hex: the INTEGER's content bytes without the 00
   * that DER puts before a high first byte (as @peculiar/x509 reports it, so
   * audit records and `forelead ca issue` agree).
   */
  readonly serialHex: string;
  /** Every URI SAN, in order, across all subjectAltName extensions. */
  readonly uris: readonly string[];
  /** keyUsage has keyCertSign or cRLSign set. */
  readonly signsCertificates: boolean;
  /** basicConstraints has cA = TRUE. */
  readonly ca: boolean;
}

/** A certificate whose DER could not be read. */
export class MalformedCertificateError extends Error {}

const SEQUENCE = 0x30;
const INTEGER = 0x02;
const BOOLEAN = 0x01;
const BIT_STRING = 0x03;
const OCTET_STRING = 0x04;
const OID = 0x06;
const VERSION = 0xa0; // [0] EXPLICIT
const EXTENSIONS = 0xa3; // [3] EXPLICIT
const URI_NAME = 0x86; // GeneralName uniformResourceIdentifier, [6] IMPLICIT IA5String

// Extension OIDs as DER content bytes: 2.5.29.17, 2.5.29.15, 2.5.29.19.
const subjectAltName = "551d11";
const keyUsage = "551d0f";
const basicConstraints = "551d13";

/** One DER element: its tag and where its content lies in the buffer. */
interface Element {
  readonly tag: number;
  readonly start: number;
  readonly end: number;
}

/** Reads the policy's fields from a certificate's DER; throws MalformedCertificateError. */
export function readLeafFields(der: Uint8Array): LeafFields {
  const cert = only(der, 0, der.length, SEQUENCE, "certificate");
  const tbs = expect(children(der, cert)[0], SEQUENCE, "tbsCertificate");
  const fields = children(der, tbs);
  let i = fields[0]?.tag === VERSION ? 1 : 0;
  const serial = expect(fields[i++], INTEGER, "serialNumber");
  const extensions = fields.find((f) => f.tag === EXTENSIONS);
  const serialStart =
    serial.end - serial.start > 1 && der[serial.start] === 0 ? serial.start + 1 : serial.start;
  const out = {
    serialHex: hex(der, { ...serial, start: serialStart }),
    uris: [] as string[],
    signsCertificates: false,
    ca: false,
  };
  if (!extensions) return out;
  const list = only(der, extensions.start, extensions.end, SEQUENCE, "extensions");
  for (const ext of children(der, list)) {
    const parts = children(der, expect(ext, SEQUENCE, "extension"));
    const id = hex(der, expect(parts[0], OID, "extension id"));
    const value = expect(parts[parts.length - 1], OCTET_STRING, "extension value");
    if (id === subjectAltName) {
      const names = only(der, value.start, value.end, SEQUENCE, "subjectAltName");
      for (const name of children(der, names))
        if (name.tag === URI_NAME)
          out.uris.push(Buffer.from(der.subarray(name.start, name.end)).toString("latin1"));
    } else if (id === keyUsage) {
      const bits = only(der, value.start, value.end, BIT_STRING, "keyUsage");
      // Content: the count of unused bits, then bit 0 (digitalSignature) as the first byte's top
      // bit; keyCertSign is bit 5 (0x04) and cRLSign bit 6 (0x02) of the first byte.
      const first = bits.end - bits.start > 1 ? der[bits.start + 1]! : 0;
      out.signsCertificates = (first & 0x06) !== 0;
    } else if (id === basicConstraints) {
      const seq = only(der, value.start, value.end, SEQUENCE, "basicConstraints");
      const flag = children(der, seq)[0];
      out.ca = flag?.tag === BOOLEAN && flag.end - flag.start === 1 && der[flag.start] !== 0;
    }
  }
  return out;
}

/** The single element filling [start, end), with the given tag. */
function only(der: Uint8Array, start: number, end: number, tag: number, what: string): Element {
  const element = readElement(der, start, end, what);
  if (element.end !== end)
    throw new MalformedCertificateError(`${what}: trailing bytes after the element`);
  return expect(element, tag, what);
}

function expect(element: Element | undefined, tag: number, what: string): Element {
  if (!element) throw new MalformedCertificateError(`${what} is missing`);
  if (element.tag !== tag)
    throw new MalformedCertificateError(
      `${what}: expected tag 0x${tag.toString(16)}, found 0x${element.tag.toString(16)}`,
    );
  return element;
}

/** The elements inside a constructed element. */
function children(der: Uint8Array, parent: Element): Element[] {
  const out: Element[] = [];
  for (let at = parent.start; at < parent.end;) {
    const child = readElement(der, at, parent.end, "element");
    out.push(child);
    at = child.end;
  }
  return out;
}

/**
 * Reads the tag and definite length at `at`, bounded by `limit` (DER: single-byte tags, no
 * indefinite length).
 */
function readElement(der: Uint8Array, at: number, limit: number, what: string): Element {
  if (at + 2 > limit) throw new MalformedCertificateError(`${what}: truncated`);
  const tag = der[at]!;
  if ((tag & 0x1f) === 0x1f)
    throw new MalformedCertificateError(`${what}: multi-byte tags are not used in certificates`);
  let length = der[at + 1]!;
  let start = at + 2;
  if (length & 0x80) {
    const octets = length & 0x7f;
    if (octets === 0 || octets > 4)
      throw new MalformedCertificateError(`${what}: unsupported length encoding`);
    if (start + octets > limit) throw new MalformedCertificateError(`${what}: truncated length`);
    length = 0;
    for (let k = 0; k < octets; k++) length = length * 256 + der[start + k]!;
    start += octets;
  }
  if (start + length > limit)
    throw new MalformedCertificateError(`${what}: its length runs past its enclosing element`);
  return { tag, start, end: start + length };
}

function hex(der: Uint8Array, element: Element): string {
  return Buffer.from(der.subarray(element.start, element.end)).toString("hex");
}
