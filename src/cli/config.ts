import { dirname, resolve } from "node:path";
import { Command, InvalidArgumentError, type Option } from "commander";
import {
  configError,
  connectionKeys,
  readConfigFile,
  resolveConnection,
  withAdminClientOptions,
  type AdminClientFlags,
  type ConfigFile,
} from "./connection.js";
import { formatTable } from "./doctor.js";

interface ShowFlags extends AdminClientFlags {
  json?: boolean;
}

/** `forelead config show`: the resolved connection and where each value came from. */
export function configCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const config = new Command("config");
  withAdminClientOptions(
    config
      .command("show")
      .description(
        "print the connection the admin commands would use and where each value " +
          "came from (flag, env, file, default); never a key's contents",
      )
      .option("--json", "print it as JSON"),
  ).action(async (flags: ShowFlags) => {
    const resolved = await resolveConnection(flags);
    if (flags.json) {
      write(
        `${JSON.stringify({ file: resolved.file ?? null, profile: resolved.profile ?? null, ...resolved.settings })}\n`,
      );
      return;
    }
    const rows = connectionKeys.map((k) => [
      k,
      resolved.settings[k].value,
      resolved.settings[k].source,
    ]);
    const lines = [
      `config file: ` +
        `${resolved.file ?? "none (FORELEAD_CONFIG, ./forelead.toml, $XDG_CONFIG_HOME/forelead/config.toml)"}`,
      `profile: ${resolved.profile ? `${resolved.profile.value} (${resolved.profile.source})` : "none"}`,
      ...formatTable(rows),
    ];
    write(lines.join("\n") + "\n");
  });
  return config;
}

/**
 * A placeholder of a flag whose value is a file or directory: relative values in the config file
 * resolve against the file's directory.
 */
const pathPlaceholder = /<[^>]*\b(file|dir)\b[^>]*>/;

/**
 * `forelead serve --config FILE`: sets each option of the file's [serve]
 * table (keys are the long flag names without "--": listen, database,
 * secrets-key, metrics-listen, grant = [...], admin = [...]) that was not
 * given as a flag, through the option's own parser, so a value is checked
 * as the flag would be. Flags win over the file. Errors name the file,
 * the line and the key.
 */
export async function applyServeConfig(command: Command, path: string): Promise<void> {
  const file = await readConfigFile(resolve(path));
  const table = file.data.serve;
  if (table === undefined)
    throw new Error(
      `config file ${file.path}: no [serve] table; put serve's options there, e.g. listen = "0.0.0.0:8443"`,
    );
  if (typeof table !== "object" || table === null || Array.isArray(table))
    throw configError(file, [], "serve", "must be a table of serve's options");
  for (const [key, value] of Object.entries(table as Record<string, unknown>)) {
    const option = command.options.find((o) => o.long === `--${key}`);
    if (!option || key === "config")
      throw configError(
        file,
        ["serve"],
        key,
        `not an option of forelead serve (keys are its flag names without "--": ` +
          `listen, database, secrets-key, grant, ...)`,
      );
    const name = option.attributeName();
    if (command.getOptionValueSource(name) === "cli") continue; // the flag wins
    command.setOptionValueWithSource(name, optionValue(file, option, key, value), "config");
  }
}

function optionValue(file: ConfigFile, option: Option, key: string, value: unknown): unknown {
  const fail = (problem: string) => configError(file, ["serve"], key, problem);
  if (option.isBoolean()) {
    if (typeof value !== "boolean") throw fail("must be true or false");
    return value;
  }
  const repeatable = Array.isArray(option.defaultValue);
  const values = Array.isArray(value) ? value : [value];
  if (Array.isArray(value) && !repeatable) throw fail("takes one value, not a list");
  let parsed: unknown = repeatable ? [] : undefined;
  for (const v of values) {
    if (typeof v !== "string" && typeof v !== "number")
      throw fail("must be a string or a number" + (repeatable ? " (or a list of them)" : ""));
    let text = String(v);
    if (pathPlaceholder.test(option.flags) && !/^[a-z]+:\/\//i.test(text))
      text = resolve(dirname(file.path), text);
    try {
      parsed = option.parseArg ? option.parseArg(text, parsed) : text;
    } catch (err) {
      if (err instanceof InvalidArgumentError) throw fail(err.message);
      throw err;
    }
  }
  return parsed;
}
