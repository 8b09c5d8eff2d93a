import { X509Certificate } from "node:crypto";
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createClient, type Client } from "@connectrpc/connect";
import { Http2SessionManager, createConnectTransport } from "@connectrpc/connect-node";
import type { DescService } from "@bufbuild/protobuf";
import type { Command } from "commander";
import { parse as parseToml, TomlError } from "smol-toml";
import { AdminService } from "../../gen/forelead/admin/v1/admin_pb.js";
import {
  checkClientCertificate,
  ClientCertificateError,
  tlsFailureInterceptor,
} from "./connection-tls.js";

/**
 * The one home of how an admin command reaches the control plane: the
 * connection flags, their environment variables and config file, the
 * precedence flag > environment > file > defaults, and the client built
 * from the result.
 *
 * The config file (docs/cli.md): $FORELEAD_CONFIG, else ./forelead.toml,
 * else $XDG_CONFIG_HOME/forelead/config.toml (~/.config when unset). TOML,
 * or JSON when the name ends in .json. Profiles live under [profiles.NAME];
 * `profile = "NAME"` at the top picks the default one, else "default".
 * Relative paths in the file are relative to the file's directory.
 */

/** The connection settings, by the name of their flag. */
export const connectionKeys = ["server", "ca", "cert", "key"] as const;
type ConnectionKey = (typeof connectionKeys)[number];

/**
 * The flags every admin CLI command takes to reach the control plane; unset ones come from the
 * environment, the file or the defaults.
 */
export interface AdminClientFlags {
  readonly server?: string;
  readonly ca?: string;
  readonly cert?: string;
  readonly key?: string;
  readonly profile?: string;
}

/**
 * The defaults: what the README's quick start creates (`npm start` makes certs/ca.pem; `forelead ca
 * issue ... --out certs/cli`).
 */
const connectionDefaults: Readonly<Record<ConnectionKey, string>> = {
  server: "https://127.0.0.1:8443",
  ca: "certs/ca.pem",
  cert: "certs/cli.pem",
  key: "certs/cli-key.pem",
};

const envNames: Readonly<Record<ConnectionKey | "profile", string>> = {
  server: "FORELEAD_SERVER",
  ca: "FORELEAD_CA",
  cert: "FORELEAD_CERT",
  key: "FORELEAD_KEY",
  profile: "FORELEAD_PROFILE",
};
const pathKeys = new Set<string>(["ca", "cert", "key"]);

/**
 * One resolved setting and where it came from ("flag --ca", "env FORELEAD_CA", "file F (profile
 * P)", "default").
 */
interface Resolved {
  readonly value: string;
  readonly source: string;
}

/** The resolved connection: each setting with its source, and the profile and file used. */
export interface ResolvedConnection {
  readonly settings: Readonly<Record<ConnectionKey, Resolved>>;
  readonly profile: Resolved | undefined;
  readonly file: string | undefined;
}

/**
 * Adds --server, --ca, --cert, --key and --profile to `command` (no commander defaults: unset flags
 * fall through to env, file, defaults).
 */
export function withAdminClientOptions(command: Command): Command {
  return command
    .option(
      "--server <url>",
      `the control plane (env FORELEAD_SERVER; default ${connectionDefaults.server})`,
    )
    .option(
      "--ca <file>",
      `CA bundle for the server certificate, PEM (env FORELEAD_CA; default ${connectionDefaults.ca})`,
    )
    .option(
      "--cert <file>",
      `client certificate of an identity granted a role, PEM (env FORELEAD_CERT; default ${connectionDefaults.cert})`,
    )
    .option(
      "--key <file>",
      `its private key, PEM (env FORELEAD_KEY; default ${connectionDefaults.key})`,
    )
    .option(
      "--profile <name>",
      "a profile of the config file (env FORELEAD_PROFILE; see forelead config show)",
    );
}

/**
 * The config file to read: $FORELEAD_CONFIG (which must exist), else ./forelead.toml, else
 * $XDG_CONFIG_HOME/forelead/config.toml; undefined when none exists.
 */
function configFilePath(
  env: NodeJS.ProcessEnv = process.env,
  cwd = process.cwd(),
): string | undefined {
  if (env.FORELEAD_CONFIG) return resolve(cwd, env.FORELEAD_CONFIG);
  const local = join(cwd, "forelead.toml");
  if (existsSync(local)) return local;
  const xdg = env.XDG_CONFIG_HOME || (env.HOME ? join(env.HOME, ".config") : undefined);
  const user = xdg ? join(xdg, "forelead", "config.toml") : undefined;
  return user && existsSync(user) ? user : undefined;
}

/**
 * Where `forelead login` keeps the person's certificate and key (0600): beside the user's config
 * file, $XDG_CONFIG_HOME/forelead/login.pem and login-key.pem (~/.config when unset).
 */
export function loginCertificatePaths(env: NodeJS.ProcessEnv = process.env): {
  cert: string;
  key: string;
} {
  const xdg = env.XDG_CONFIG_HOME || join(env.HOME || homedir(), ".config");
  return {
    cert: join(xdg, "forelead", "login.pem"),
    key: join(xdg, "forelead", "login-key.pem"),
  };
}

/** The source a connection names for the certificate of `forelead login`. */
export const loginSource = "forelead login";

/** A parsed config file: its path, its text (to find lines in) and its top-level table. */
export interface ConfigFile {
  readonly path: string;
  readonly text: string;
  readonly data: Record<string, unknown>;
}

/** Reads and parses `path` (TOML, or JSON for *.json); an error names the file and the line. */
export async function readConfigFile(path: string): Promise<ConfigFile> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new Error(
      `config file ${path}: cannot read it ` +
        `(${(err as NodeJS.ErrnoException).code ?? (err as Error).message})` +
        `${process.env.FORELEAD_CONFIG ? "; FORELEAD_CONFIG names it" : ""}`,
    );
  }
  let data: unknown;
  if (path.endsWith(".json")) {
    try {
      data = JSON.parse(text);
    } catch (err) {
      const at = /position (\d+)/.exec((err as Error).message);
      const line = at ? text.slice(0, Number(at[1])).split("\n").length : undefined;
      throw new Error(
        `config file ${path}${line ? `:${line}` : ""}: not valid JSON: ${(err as Error).message}`,
      );
    }
  } else {
    try {
      data = parseToml(text);
    } catch (err) {
      if (err instanceof TomlError)
        throw new Error(
          `config file ${path}:${err.line}:${err.column}: not valid TOML: ${err.message.split("\n")[0]}`,
        );
      throw err;
    }
  }
  if (!isTable(data))
    throw new Error(`config file ${path}: the top level must be a table (an object)`);
  return { path, text, data };
}

/**
 * A `problem` with key `key` of table `table` ([] for the top, ["profiles", "prod"]), naming the
 * file, the line and the key.
 */
export function configError(
  file: ConfigFile,
  table: readonly string[],
  key: string,
  problem: string,
): Error {
  const line = lineOf(file, table, key);
  const name = [...table, key].join(".");
  return new Error(`config file ${file.path}${line ? `:${line}` : ""}: key ${name}: ${problem}`);
}

/**
 * The line where `key` is set in `table`: after the table's header (TOML) or anywhere (JSON);
 * undefined when it cannot be found.
 */
function lineOf(file: ConfigFile, table: readonly string[], key: string): number | undefined {
  const lines = file.text.split("\n");
  const json = file.path.endsWith(".json");
  const esc = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  let from = 0;
  if (!json && table.length > 0) {
    const header = new RegExp(`^\\s*\\[\\s*${table.map(esc).join("\\s*\\.\\s*")}\\s*\\]`);
    const at = lines.findIndex((l) => header.test(l));
    if (at >= 0) from = at + 1;
  }
  const pattern = json
    ? new RegExp(`"${esc(key)}"\\s*:`)
    : new RegExp(
        `^\\s*(${table.map(esc).join("\\.")}${table.length ? "\\." : ""})?"?${esc(key)}"?\\s*=`,
      );
  for (let i = from; i < lines.length; i++) if (pattern.test(lines[i]!)) return i + 1;
  return undefined;
}

function isTable(value: unknown): value is Record<string, unknown> {
  return (
    typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Date)
  );
}

const topKeys = new Set(["profile", "profiles", "serve"]);

/**
 * The connection settings of `profile` in `file`; every profile is checked (only known keys,
 * non-empty strings), and paths resolve against the file's directory.
 */
function profileSettings(
  file: ConfigFile,
  profile: string,
): Partial<Record<ConnectionKey, string>> | undefined {
  for (const key of Object.keys(file.data))
    if (!topKeys.has(key))
      throw configError(
        file,
        [],
        key,
        `unknown key; the top level takes profile = "NAME", [profiles.NAME] ` +
          `tables (${connectionKeys.join(", ")}) and a [serve] table`,
      );
  const profiles = file.data.profiles ?? {};
  if (!isTable(profiles))
    throw configError(file, [], "profiles", "must be a table of profiles, e.g. [profiles.prod]");
  const all = new Map<string, Partial<Record<ConnectionKey, string>>>();
  for (const [name, table] of Object.entries(profiles)) {
    if (!isTable(table))
      throw configError(file, ["profiles"], name, "must be a table with server, ca, cert and key");
    const settings: Partial<Record<ConnectionKey, string>> = {};
    for (const [key, value] of Object.entries(table)) {
      if (!(connectionKeys as readonly string[]).includes(key))
        throw configError(
          file,
          ["profiles", name],
          key,
          `unknown key; a profile takes ${connectionKeys.join(", ")}`,
        );
      if (typeof value !== "string" || value === "")
        throw configError(file, ["profiles", name], key, "must be a non-empty string");
      settings[key as ConnectionKey] = pathKeys.has(key)
        ? resolve(dirname(file.path), value)
        : value;
    }
    all.set(name, settings);
  }
  return all.get(profile);
}

/**
 * Resolves the connection from `flags`, `env` and the config file: flag > env > file > defaults.
 */
export async function resolveConnection(
  flags: AdminClientFlags,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ResolvedConnection> {
  const path = configFilePath(env);
  const file = path ? await readConfigFile(path) : undefined;
  let profile: Resolved | undefined;
  if (flags.profile) profile = { value: flags.profile, source: "flag --profile" };
  else if (env.FORELEAD_PROFILE)
    profile = { value: env.FORELEAD_PROFILE, source: "env FORELEAD_PROFILE" };
  else if (file && file.data.profile !== undefined) {
    if (typeof file.data.profile !== "string")
      throw configError(file, [], "profile", "must be a string naming a [profiles.NAME] table");
    profile = { value: file.data.profile, source: `file ${file.path}` };
  }
  let fromFile: Partial<Record<ConnectionKey, string>> = {};
  if (file) {
    const name = profile?.value ?? "default";
    const found = profileSettings(file, name);
    if (!found && profile) {
      const known = Object.keys(isTable(file.data.profiles) ? file.data.profiles : {});
      throw new Error(
        `profile ${JSON.stringify(name)} (${profile.source}) is not in config ` +
          `file ${file.path}; it has ` +
          `${known.length ? known.join(", ") : "no profiles"}`,
      );
    }
    fromFile = found ?? {};
    if (found && !profile) profile = { value: "default", source: `file ${file.path}` };
  } else if (profile) {
    throw new Error(
      `profile ${JSON.stringify(profile.value)} (${profile.source}) needs a ` +
        `config file, and none was found: set FORELEAD_CONFIG, or write ` +
        `./forelead.toml or ` +
        `${join(env.XDG_CONFIG_HOME || "~/.config", "forelead", "config.toml")}`,
    );
  }
  const settings = {} as Record<ConnectionKey, Resolved>;
  for (const key of connectionKeys) {
    const flag = flags[key];
    const fromEnv = env[envNames[key]];
    settings[key] =
      flag !== undefined
        ? { value: flag, source: `flag --${key}` }
        : fromEnv
          ? { value: fromEnv, source: `env ${envNames[key]}` }
          : fromFile[key] !== undefined
            ? { value: fromFile[key], source: `file ${file!.path} (profile ${profile!.value})` }
            : { value: connectionDefaults[key], source: "default" };
  }
  // Given no certificate anywhere, a person's own sign-in is the identity.
  const login = loginCertificatePaths(env);
  if (
    settings.cert.source === "default" &&
    settings.key.source === "default" &&
    existsSync(login.cert)
  ) {
    settings.cert = { value: login.cert, source: loginSource };
    settings.key = { value: login.key, source: loginSource };
  }
  return { settings, profile, file: file?.path };
}

/**
 * A generated client of an admin-side service with a way to close its connection, so a command
 * exits as soon as it is done.
 */
interface Connection<S extends DescService> {
  readonly client: Client<S>;
  close(): void;
}

/**
 * The control plane's base URL (no trailing slash) and the TLS material to reach it: what every
 * client (and the dashboard's proxy) is built from.
 */
export interface Endpoint {
  readonly baseUrl: string;
  readonly ca: string;
  readonly cert: string;
  readonly key: string;
}

/**
 * Resolves the connection and reads its files: the server URL (must be
 * https://) and the CA, certificate and key PEMs. Errors name the setting,
 * its source and the file that cannot be read.
 */
export async function resolveEndpoint(flags: AdminClientFlags): Promise<Endpoint> {
  return (await resolveEndpointAndSettings(flags)).endpoint;
}

/** resolveEndpoint, with the settings it came from (for explaining a failure). */
async function resolveEndpointAndSettings(
  flags: AdminClientFlags,
): Promise<{ endpoint: Endpoint; settings: Record<ConnectionKey, Resolved> }> {
  const { baseUrl, ca, settings } = await resolveServer(flags);
  const [cert, key] = await Promise.all([
    readSetting(settings.cert, "cert"),
    readSetting(settings.key, "key"),
  ]);
  if (settings.cert.source === loginSource) {
    const notAfter = new Date(new X509Certificate(cert).validTo);
    if (notAfter.getTime() <= Date.now())
      throw new ClientCertificateError(
        `your sign-in expired at ${notAfter.toISOString()} (${settings.cert.value}); ` +
          `run forelead login again`,
      );
  }
  checkClientCertificate(settings, { cert, key });
  return { endpoint: { baseUrl, ca, cert, key }, settings };
}

/**
 * The server URL (must be https://) and its CA bundle, without a client certificate: what a
 * caller that has none yet (`forelead login`) needs.
 */
export async function resolveServer(
  flags: AdminClientFlags,
): Promise<{ baseUrl: string; ca: string; settings: Record<ConnectionKey, Resolved> }> {
  const { settings } = await resolveConnection(flags);
  const server = settings.server;
  let url: URL;
  try {
    url = new URL(server.value);
  } catch {
    throw new Error(
      `server ${JSON.stringify(server.value)} (${server.source}) is not a URL; e.g. https://127.0.0.1:8443`,
    );
  }
  if (url.protocol !== "https:")
    throw new Error(`server (${server.source}) must be an https:// URL; got ${server.value}`);
  const ca = await readSetting(settings.ca, "ca");
  return { baseUrl: url.toString().replace(/\/$/, ""), ca, settings };
}

/**
 * Opens a client of `service` from the resolved connection: Connect protocol
 * (binary) over HTTP/2 + TLS with the client certificate.
 */
async function connect<S extends DescService>(
  flags: AdminClientFlags,
  service: S,
): Promise<Connection<S>> {
  const { endpoint, settings } = await resolveEndpointAndSettings(flags);
  const { baseUrl, ca, cert, key } = endpoint;
  const nodeOptions = { ca, cert, key };
  const sessionManager = new Http2SessionManager(baseUrl, {}, nodeOptions);
  const transport = createConnectTransport({
    baseUrl,
    httpVersion: "2",
    useBinaryFormat: true,
    nodeOptions,
    sessionManager,
    interceptors: [tlsFailureInterceptor(settings)],
  });
  return { client: createClient(service, transport), close: () => sessionManager.abort() };
}

/**
 * Runs `use` with a client of `service`, closing the connection afterwards so the process can exit.
 */
export async function withService<S extends DescService, T>(
  flags: AdminClientFlags,
  service: S,
  use: (client: Client<S>) => Promise<T>,
): Promise<T> {
  const { client, close } = await connect(flags, service);
  try {
    return await use(client);
  } finally {
    close();
  }
}

/** A client of `service` whose connection closes when the process exits (for one-call commands). */
export async function serviceClientFromFlags<S extends DescService>(
  flags: AdminClientFlags,
  service: S,
): Promise<Client<S>> {
  return (await connect(flags, service)).client;
}

/** The AdminService client, as serviceClientFromFlags. */
export async function adminClientFromFlags(
  flags: AdminClientFlags,
): Promise<Client<typeof AdminService>> {
  return serviceClientFromFlags(flags, AdminService);
}

/** The AdminService client with a close, as connect. */
export async function openAdminClient(
  flags: AdminClientFlags,
): Promise<{ admin: Client<typeof AdminService>; close(): void }> {
  const { client, close } = await connect(flags, AdminService);
  return { admin: client, close };
}

async function readSetting(setting: Resolved, name: string): Promise<string> {
  try {
    return await readFile(setting.value, "utf8");
  } catch (err) {
    throw new Error(
      `cannot read --${name} ${setting.value}: ` +
        `${(err as NodeJS.ErrnoException).code ?? (err as Error).message} ` +
        `(${setting.source})`,
    );
  }
}
