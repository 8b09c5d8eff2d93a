import { PassThrough } from "node:stream";
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { JobSchema, JobSpecSchema, LeaseSchema } from "../../gen/forelead/runner/v1/job_pb.js";
import { forEachLine, maxLineChars } from "../../src/runner/executors/lines.js";
import {
  createSecretMasker,
  leaseSecretValues,
  maskedForms,
} from "../../src/runner/output/secret-masker.js";
import { looksSecret, secretFileNameProblem } from "../../src/protocol/secret-names.js";

/**
 * Feeds `pieces` through one stream of a masker and returns what it released, piece by piece, and
 * in all.
 */
function through(values: string[], pieces: string[]) {
  const stream = createSecretMasker(values).stream();
  const released = pieces.map((p) => stream.write(p));
  released.push(stream.end());
  return { released, all: released.join("") };
}

/** Every substring of `value` of `n` characters. */
const substrings = (value: string, n: number) =>
  Array.from({ length: value.length - n + 1 }, (_, i) => value.slice(i, i + n));

describe("the streaming secret masker", () => {
  const secret = "hunter2-correct-horse";

  it("masks a value split over two writes, and releases nothing of it before the second", () => {
    const { released, all } = through([secret], ["token=hunter2-cor", "rect-horse done"]);
    expect(all).toBe("token=*** done");
    expect(released[0]).toBe("token="); // the held tail is a prefix of the secret: not sent
    expect(released[1]).toBe("*** done");
  });

  it("masks a value split into single characters", () => {
    expect(through([secret], [...("a " + secret + " b")]).all).toBe("a *** b");
  });

  it("releases a held tail at once when the next write shows it is not a secret", () => {
    const { released } = through([secret], ["say hunt", "ing season"]);
    expect(released).toEqual(["say ", "hunting season", ""]);
  });

  it("flushes a held tail that never became a secret at the end of the stream", () => {
    expect(through([secret], ["ends with hunter2-"]).released).toEqual(["ends with ", "hunter2-"]);
  });

  it("masks a value that holds a line break, printed in pieces", () => {
    const pem = "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END KEY-----\n";
    const { all } = through(
      [pem],
      [
        "cat key:\n-----BEGIN KEY---",
        "--\nMIIEvQIBADANBgkq",
        "hkiG9w0BAQEFAASC\n-----END KEY-----\nafter\n",
      ],
    );
    expect(all).toBe("cat key:\n***after\n");
  });

  it("masks overlapping values as one stretch, leaving no piece of either", () => {
    expect(through(["abcdefgh", "efghijkl"], ["xx abcdefghijkl yy"]).all).toBe("xx *** yy");
    expect(through(["abcdefgh", "efghijkl"], ["xx abcdef", "ghijkl yy"]).all).toBe("xx *** yy");
  });

  it("masks a value that is a prefix of another: the longer whole, the shorter alone", () => {
    const values = ["pass-1234", "pass-1234-extended"];
    expect(through(values, ["a pass-1234-extended b"]).all).toBe("a *** b");
    expect(through(values, ["a pass-1234", "-ext", "ended b"]).all).toBe("a *** b");
    expect(through(values, ["a pass-1234", "-other b"]).all).toBe("a ***-other b");
    expect(through(values, ["a pass-1234"]).all).toBe("a ***");
  });

  it("masks a stretch that goes on after a write ended inside it", () => {
    // "abcdefgh" ends in the first write, and a second value that starts inside it may still be
    // going on.
    const { released, all } = through(["abcdefgh", "ghijklmn"], ["abcdefgh", "ijklmn!"]);
    expect(released[0]).toBe("***");
    expect(all).toBe("***!");
    expect(through(["abcdefgh", "ghijklmn"], ["abcdefgh", "ij?"]).all).toBe("***ij?");
  });

  it("masks multibyte values, and bytes of a character split across reads are decoded first", async () => {
    const value = "pässwörd-€-🔑-geheim";
    const bytes = Buffer.from(`x=${value};\n`);
    const stream = new PassThrough();
    const lines: string[] = [];
    const done = forEachLine(stream, (l) => lines.push(l), createSecretMasker([value]).stream());
    const euro = bytes.indexOf(Buffer.from("€"));
    const key = bytes.indexOf(Buffer.from("🔑"));
    stream.write(bytes.subarray(0, euro + 1)); // inside €
    stream.write(bytes.subarray(euro + 1, key + 2)); // inside the key emoji
    stream.end(bytes.subarray(key + 2));
    await done;
    expect(lines).toEqual(["x=***;"]);
  });

  it("masks a value across the 16 KiB cut of a long line", async () => {
    const value = "S3CRET-across-the-chunk-boundary";
    const stream = new PassThrough();
    const lines: string[] = [];
    const done = forEachLine(stream, (l) => lines.push(l), createSecretMasker([value]).stream());
    const before = "x".repeat(maxLineChars - 10);
    stream.write(before + value.slice(0, 5));
    stream.end(`${value.slice(5)}tail\n`);
    await done;
    const text = lines.join("");
    expect(text).toBe(`${before}***tail`);
    for (const piece of substrings(value, 8)) expect(text).not.toContain(piece);
  });

  it("masks every occurrence, in whole texts too, and leaves text without secrets as it was", () => {
    const masker = createSecretMasker([secret, ""]);
    expect(masker.text(`${secret}/${secret}`)).toBe("***/***");
    expect(masker.text("nothing here")).toBe("nothing here");
    expect(
      masker.value({
        type: "job.artifacts",
        skipped: [{ name: `${secret}.txt`, reason: "odd" }],
        count: 2,
      }),
    ).toEqual({ type: "job.artifacts", skipped: [{ name: "***.txt", reason: "odd" }], count: 2 });
    expect(through([], ["as ", "is"]).released).toEqual(["as ", "is", ""]);
  });

  it("a value added later is masked from then on everywhere, an open stream included", () => {
    const token = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJqb2IifQ.c2lnbmF0dXJl";
    const masker = createSecretMasker([]);
    const stream = masker.stream();
    expect(stream.write(`early ${token.slice(0, 10)}`)).toBe(`early ${token.slice(0, 10)}`);
    masker.add(maskedForms(token));
    expect(stream.write(`now ${token.slice(0, 10)}`)).toBe("now ");
    expect(stream.write(`${token.slice(10)} end`)).toBe("*** end");
    expect(masker.text(`a ${token} b`)).toBe("a *** b");
    const b64 = Buffer.from(token).toString("base64");
    expect(masker.value({ type: "deploy", token, b64 })).toEqual({
      type: "deploy",
      token: "***",
      b64: "***",
    });
  });

  it("gives the same text however the stream is cut (seeded random cuts against the whole-text result)", () => {
    let seed = 42;
    const random = (n: number) => ((seed = (seed * 1103515245 + 12345) % 2 ** 31), seed % n);
    const values = ["abab", "abcab", "bca", "cabcabc", "aa\nbb"];
    const masker = createSecretMasker(values);
    for (let round = 0; round < 500; round++) {
      const text = Array.from({ length: 40 }, () => "abc\n"[random(4)]).join("");
      const stream = masker.stream();
      let out = "";
      for (let at = 0; at < text.length;) {
        const step = 1 + random(6);
        out += stream.write(text.slice(at, at + step));
        at += step;
      }
      out += stream.end();
      expect(out, JSON.stringify(text)).toBe(masker.text(text));
      for (const v of values) expect(out).not.toContain(v);
    }
  });

  it("holds back no more than the longest tail that may still begin a value", () => {
    const { released } = through(["abcabd"], ["xxabcab"]);
    expect(released[0]).toBe("xx"); // "abcab" may still become "abcabd"
    expect(through(["abcabd"], ["xxabcab", "cabd"]).all).toBe("xxabc***");
  });
});

describe("which values a lease's masker masks", () => {
  const lease = (
    env: Record<string, string>,
    secrets: Record<string, string> = {},
    secretFiles: Record<string, string> = {},
  ) =>
    create(LeaseSchema, {
      job: create(JobSchema, { spec: create(JobSpecSchema, { env }) }),
      secrets,
      secretFiles,
    });

  it(
    "every declared secret and file content whatever its length, with a " +
      "file's lines and without its final newline",
    () => {
      const values = leaseSecretValues(
        lease({}, { A: "x1" }, { "key.pem": "line-one\nline-two\n" }),
      );
      expect(values).toEqual(
        expect.arrayContaining([
          "x1",
          "line-one\nline-two\n",
          "line-one\nline-two",
          "line-one",
          "line-two",
        ]),
      );
    },
  );

  it("spec.env values only under secret-looking names, and only from 4 characters", () => {
    const values = leaseSecretValues(
      lease({
        API_TOKEN: "tok-1",
        db_password: "pw-22",
        GIT_AUTH: "auth-3",
        SHORT_KEY: "abc",
        PLAIN: "visible",
      }),
    );
    expect(values.sort()).toEqual(["auth-3", "pw-22", "tok-1"]);
  });
});

describe("secret names", () => {
  it("looksSecret: the names the masker treats as secret (test/unit/secret-names.test.ts has the whole rule)", () => {
    for (const name of [
      "API_TOKEN",
      "aws_secret_access_key",
      "DB_PASSWORD",
      "PASSWD",
      "ssh_key",
      "GOOGLE_CREDENTIALS",
      "GIT_AUTH_HEADER",
    ])
      expect(looksSecret(name), name).toBe(true);
    for (const name of ["PATH", "HOME", "CI", "LANG"]) expect(looksSecret(name), name).toBe(false);
  });

  it("a secret file name is one path segment", () => {
    expect(secretFileNameProblem("deploy-key.pem")).toBeUndefined();
    for (const name of ["", ".", "..", "a/b", "../x", "a\\b", "a\u0000b", "x".repeat(256)])
      expect(secretFileNameProblem(name), name).toBeDefined();
  });
});

describe("a secret is masked in the encodings a job prints it in", () => {
  const quoted = 'S3CR3T-"Q\\UOTE-8888';
  const accented = "S3CR3T-café-9999";
  const slashed = "s3cr3t/with/slashes and space";
  const lease = create(LeaseSchema, {
    secrets: { A: quoted, B: accented, C: slashed },
    job: create(JobSchema, { spec: create(JobSpecSchema, {}) }),
  });
  const values = leaseSecretValues(lease);
  const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64");

  it.each([
    ["JSON as JavaScript writes it", JSON.stringify({ auth: quoted, other: accented })],
    [
      "JSON as Python's json.dumps writes it",
      '{"auth": "S3CR3T-\\"Q\\\\UOTE-8888", "other": "S3CR3T-caf\\u00e9-9999"}',
    ],
    ["JSON with upper-case escapes", '"S3CR3T-caf\\u00E9-9999"'],
    ["JSON with escaped slashes", '"s3cr3t\\/with\\/slashes and space"'],
    ["percent-encoded", `q=${encodeURIComponent(slashed)}&r=${encodeURIComponent(accented)}`],
    ["form-encoded", `q=${encodeURIComponent(slashed).replaceAll("%20", "+")}`],
    ["base64", `${b64(quoted)} ${b64(accented)}`],
    ["URL-safe base64", b64(slashed).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "")],
    ["base64 inside a longer encoded text", b64(`user:${quoted}`) + " " + b64(`xy${accented}`)],
  ])("%s", (_, printed) => {
    const masked = createSecretMasker(values).text(printed);
    // No 8 characters of any form of any secret are left.
    for (const v of values)
      for (const piece of substrings(v, Math.min(8, v.length)))
        expect(masked, `${JSON.stringify(piece)} of ${JSON.stringify(v)}`).not.toContain(piece);
    expect(masked).toContain("***");
    // Split into single characters, the stream masks it the same.
    expect(through(values, [...printed]).all).toBe(masked);
  });

  it("leaves ordinary text alone", () => {
    const text = "building café-9999 from S3CR3T docs; see https://example.com/a/b";
    expect(createSecretMasker(values).text(text)).toBe(text);
  });
});
