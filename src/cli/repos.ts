import { readFile } from "node:fs/promises";
import { Command } from "commander";
import { ConnectError } from "@connectrpc/connect";
import {
  adminClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";

/** `forelead repos ...`: repositories the code routes serve, registered through the admin API. */
export function reposCommand(): Command {
  const repos = new Command("repos");
  withAdminClientOptions(
    repos
      .command("add")
      .description(
        "register a repository (or replace its URL and credential): an absolute path, file://, https:// or ssh:// URL",
      )
      .argument("<name>", "the name jobs use, e.g. app")
      .argument("<url>", "where the repository lives; never put a password in it")
      .option(
        "--credential-file <file>",
        "https: a file holding the password or token; ssh: a private key file",
      ),
  ).action(
    async (name: string, url: string, flags: AdminClientFlags & { credentialFile?: string }) => {
      // Read here and sent once over mTLS: the credential never appears in argv or the shell
      // history.
      const credential = flags.credentialFile
        ? (await readFile(flags.credentialFile, "utf8")).replace(/\r?\n$/, "")
        : "";
      const client = await adminClientFromFlags(flags);
      const { repository } = await client
        .registerRepository({ apiVersion: "v1", name, url, credential })
        .catch(explain);
      console.log(
        `registered ${repository?.name} at ` +
          `${repository?.url}${repository?.hasCredential ? " (with a credential)" : ""}`,
      );
    },
  );
  withAdminClientOptions(
    repos.command("list").description("list the registered repositories"),
  ).action(async (flags: AdminClientFlags) => {
    const client = await adminClientFromFlags(flags);
    const { repositories } = await client.listRepositories({}).catch(explain);
    for (const r of repositories)
      console.log(`${r.name}\t${r.url}${r.hasCredential ? "\t(credential set)" : ""}`);
  });
  return repos;
}

function explain(err: unknown): never {
  const e = ConnectError.from(err);
  throw new Error(`the control plane refused: ${e.rawMessage} (${e.code})`);
}
