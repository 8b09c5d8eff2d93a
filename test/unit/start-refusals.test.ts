// Start-up refusals that need no server: a CA key that cannot be used names
// its form and the openssl command; a directory lock names its live holder
// and is taken over from a dead one; git's cause survives into an error.
import { spawnSync } from "node:child_process";
import { generateKeyPairSync } from "node:crypto";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { hostname, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runGit } from "../../src/code/git.js";
import {
  defaultSecretsKeyPath,
  readOrCreateSecretsKeyFile,
  readSecretsKeyFile,
} from "../../src/secrets/key-file.js";
import { defaultSecretsKeys } from "../../src/secrets/keys.js";
import { readSigningKey } from "../../src/identity/signing-key.js";
import { DirectoryInUse, lockDirectory, lockFileName } from "../../src/store/data-dir-lock.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-refusals-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("a CA key that cannot be used is refused naming the form found and the openssl command", () => {
  it.each([
    [
      "an encrypted PKCS#8 key",
      () =>
        generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey.export({
          type: "pkcs8",
          format: "pem",
          cipher: "aes-256-cbc",
          passphrase: "x",
        }),
      /is an encrypted PKCS#8 \(BEGIN ENCRYPTED PRIVATE KEY\) key.*`openssl pkey -in KEY -out ca-key\.pem`/,
    ],
    [
      "an encrypted SEC1 key",
      () =>
        generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey.export({
          type: "sec1",
          format: "pem",
          cipher: "aes-256-cbc",
          passphrase: "x",
        }),
      /is an encrypted SEC1 EC \(BEGIN EC PRIVATE KEY\) key.*openssl pkey/,
    ],
    [
      "a P-384 key",
      () =>
        generateKeyPairSync("ec", { namedCurve: "secp384r1" }).privateKey.export({
          type: "sec1",
          format: "pem",
        }),
      /is a SEC1 EC \(BEGIN EC PRIVATE KEY\) key on curve secp384r1;.*openssl ecparam -name prime256v1 -genkey/,
    ],
    [
      "an Ed25519 key",
      () => generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }),
      /is a PKCS#8 \(BEGIN PRIVATE KEY\) ed25519 key/,
    ],
    [
      "a certificate",
      () => "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
      /holds a PEM "CERTIFICATE", not a private key/,
    ],
  ])("%s", (_what, pem, message) => {
    expect(() => readSigningKey(String(pem()), "the CA key")).toThrow(message);
  });

  it("SEC1, PKCS#8 and PKCS#1 keys are read and converted to PKCS#8", () => {
    const ec = generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey;
    const rsa = generateKeyPairSync("rsa", { modulusLength: 2048 }).privateKey;
    const pkcs8 = ec.export({ type: "pkcs8", format: "der" });
    expect(readSigningKey(String(ec.export({ type: "sec1", format: "pem" })), "k")).toMatchObject({
      form: "SEC1 EC (BEGIN EC PRIVATE KEY)",
      pkcs8,
    });
    expect(readSigningKey(String(ec.export({ type: "pkcs8", format: "pem" })), "k")).toMatchObject({
      form: "PKCS#8 (BEGIN PRIVATE KEY)",
      pkcs8,
    });
    expect(readSigningKey(String(rsa.export({ type: "pkcs1", format: "pem" })), "k")).toMatchObject(
      {
        form: "PKCS#1 RSA (BEGIN RSA PRIVATE KEY)",
        signingAlgorithm: { name: "RSASSA-PKCS1-v1_5" },
      },
    );
  });
});

describe("a directory lock", () => {
  const lockFile = (d: string) => join(d, lockFileName);

  it("is refused while held, naming the holder, and can be taken again once released", async () => {
    const d = join(dir, "held");
    const lock = lockDirectory(d, "forelead serve", "stop it");
    const holder = JSON.parse(await readFile(lockFile(d), "utf8"));
    expect(holder).toMatchObject({
      pid: process.pid,
      hostname: hostname(),
      command: "forelead serve",
    });
    expect(() => lockDirectory(d, "forelead serve", "stop it")).toThrow(
      new DirectoryInUse(d, holder, "stop it"),
    );
    expect(() => lockDirectory(d, "forelead serve", "stop it")).toThrow(
      `${d} is in use by forelead serve (pid ${process.pid}, started ${holder.startedAt}); stop it`,
    );
    lock.close();
    lockDirectory(d, "forelead serve", "stop it").close();
  });

  it(
    "left by a process that is gone, by a reused pid (pid 1, alive, with " +
      "another start time) or half written, is stale and taken over",
    async () => {
      const dead = spawnSync(process.execPath, ["-e", ""]).pid;
      for (const [name, content] of [
        [
          "dead",
          JSON.stringify({
            pid: dead,
            startedAt: new Date().toISOString(),
            hostname: hostname(),
            command: "forelead serve",
          }),
        ],
        [
          "reused",
          JSON.stringify({
            pid: 1,
            startedAt: "2001-01-01T00:00:00.000Z",
            hostname: hostname(),
            command: "forelead serve",
          }),
        ],
        ["half", ""],
      ] as const) {
        const d = join(dir, name);
        lockDirectory(d, "x", "x").close();
        await writeFile(lockFile(d), content);
        const lock = lockDirectory(d, "forelead runner", "stop it");
        expect(JSON.parse(await readFile(lockFile(d), "utf8"))).toMatchObject({
          pid: process.pid,
          command: "forelead runner",
        });
        lock.close();
      }
    },
  );

  it("recorded on another host is never taken over", async () => {
    const d = join(dir, "remote");
    lockDirectory(d, "x", "x").close();
    await writeFile(
      lockFile(d),
      JSON.stringify({
        pid: 4242,
        startedAt: "2026-01-01T00:00:00.000Z",
        hostname: "elsewhere",
        command: "forelead serve",
      }),
    );
    expect(() => lockDirectory(d, "forelead serve", "stop it")).toThrow(
      "is in use by forelead serve (pid 4242 on elsewhere, started 2026-01-01T00:00:00.000Z)",
    );
  });
});

describe("git errors", () => {
  it("keep git's fatal: line, not only the advice after it", async () => {
    const repo = join(dir, "repo");
    await runGit(["init", "--quiet", repo]);
    const failed = await runGit(["fetch", "--quiet", "missing.bundle", "+refs/*:refs/x/*"], {
      cwd: repo,
    }).catch((err: Error) => err);
    expect((failed as Error).message).toContain(
      "fatal: 'missing.bundle' does not appear to be a git repository",
    );
  });
});

describe("the secrets key", () => {
  it("is made on the first start with mode 0600, one line of base64, and read back the same on the next", async () => {
    const path = join(dir, "data", "secrets.key");
    const made = await readOrCreateSecretsKeyFile(path);
    expect(made.created).toBe(true);
    expect((await stat(path)).mode & 0o777).toBe(0o600);
    expect(await readFile(path, "utf8")).toMatch(/^[A-Za-z0-9+/]{43}=\n$/);
    const again = await readOrCreateSecretsKeyFile(path);
    expect(again.created).toBe(false);
    expect(again.key.key.equals(made.key.key)).toBe(true);
  });

  it("in a file others can read is refused, naming the file and the chmod to run", async () => {
    const path = join(dir, "loose.key");
    await writeFile(path, `${Buffer.alloc(32, 7).toString("base64")}\n`, { mode: 0o644 });
    await chmod(path, 0o644);
    await expect(readSecretsKeyFile(path)).rejects.toThrow(
      `the secrets key file ${path} is readable by others (mode 0644); run: chmod 600 ${path}`,
    );
  });

  it("that is not 32 bytes of base64 is refused naming the file and how to make one", async () => {
    const path = join(dir, "short.key");
    await writeFile(path, "c2hvcnQ=\n", { mode: 0o600 });
    await expect(readSecretsKeyFile(path)).rejects.toThrow(
      `the secrets key in ${path} is 5 bytes; it must be 32 random bytes, ` +
        `base64 (make one with: openssl rand -base64 32 > ${path})`,
    );
  });

  it("is made outside the data directory by default: $XDG_CONFIG_HOME, else /etc as root, else ~/.config", () => {
    expect(defaultSecretsKeyPath({ XDG_CONFIG_HOME: "/x" }, 0, "/home/a")).toBe(
      "/x/forelead/secrets.key",
    );
    expect(defaultSecretsKeyPath({}, 0, "/root")).toBe("/etc/forelead/secrets.key");
    expect(defaultSecretsKeyPath({}, 1000, "/home/a")).toBe("/home/a/.config/forelead/secrets.key");
  });

  it("is not made in a directory others can write, who could replace it", async () => {
    const open = join(dir, "open-dir");
    await mkdir(open);
    await chmod(open, 0o777);
    await expect(readOrCreateSecretsKeyFile(join(open, "secrets.key"))).rejects.toThrow(
      `the secrets key's directory ${open} is writable by others (mode 0777), who could ` +
        `replace the key; run: chmod go-w ${open}`,
    );
  });

  it("is required on a postgres:// database: the start is refused naming --secrets-key", () => {
    expect(() => defaultSecretsKeys({ shared: true, persistent: true })).toThrow(
      /a postgres:\/\/ database needs --secrets-key FILE/,
    );
    expect(defaultSecretsKeys({ shared: false, persistent: false }).current.key).toHaveLength(32);
  });
});
