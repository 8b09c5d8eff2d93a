import { execFile } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { mkdir } from "node:fs/promises";

/** Runs git in `cwd` (argv, never a shell) with a fixed identity; resolves to trimmed stdout. */
export function git(cwd: string, args: readonly string[], input?: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile(
      "git",
      [
        "-c",
        "user.name=Forelead Test",
        "-c",
        "user.email=test@forelead.invalid",
        "-c",
        "init.defaultBranch=main",
        "-c",
        "commit.gpgsign=false",
        ...args,
      ],
      {
        cwd,
        encoding: "buffer",
        maxBuffer: 512 * 1024 * 1024,
        env: { ...process.env, GIT_TERMINAL_PROMPT: "0", LC_ALL: "C" },
      },
      (err, stdout, stderr) =>
        err
          ? reject(new Error(`git ${args.join(" ")} in ${cwd}: ${stderr.toString()}`))
          : resolve(stdout.toString("utf8").trim()),
    );
    if (input) child.stdin!.end(input);
  });
}

/** A bare "origin" repository made in the test, with a work clone to commit and push from. */
export interface TestOrigin {
  /** The bare repository's path: what a repository is registered with. */
  readonly path: string;
  /** The work clone. */
  readonly work: string;
  /**
   * Commits `files` on `branch` (created from the current commit when new) and pushes; resolves to
   * the commit id.
   */
  commit(branch: string, files: Record<string, string | Buffer>, message?: string): Promise<string>;
  /** The commit id a branch points at in the origin, or undefined. */
  branchHead(branch: string): Promise<string | undefined>;
  /** `git for-each-ref` of the origin: every ref and its object, to show nothing changed. */
  refs(): Promise<string>;
  /** The tree of a commit. */
  treeOf(commit: string): Promise<string>;
  remove(): Promise<void>;
}

/** Makes a bare origin with one commit on main (README). */
export async function createTestOrigin(prefix = "forelead-origin-"): Promise<TestOrigin> {
  const root = await mkdtemp(join(tmpdir(), prefix));
  const path = join(root, "origin.git");
  const work = join(root, "work");
  await git(root, ["init", "--quiet", "--bare", path]);
  await git(root, ["init", "--quiet", work]);
  await git(work, ["remote", "add", "origin", path]);
  const origin: TestOrigin = {
    path,
    work,
    async commit(branch, files, message = `change on ${branch}`) {
      const current = await git(work, ["rev-parse", "--abbrev-ref", "HEAD"]).catch(() => "");
      if (current !== branch) {
        const exists = await git(work, [
          "rev-parse",
          "--verify",
          "--quiet",
          `refs/heads/${branch}`,
        ]).then(
          () => true,
          () => false,
        );
        await git(work, ["checkout", "--quiet", ...(exists ? [] : ["-b"]), branch]);
      }
      for (const [name, content] of Object.entries(files)) {
        await mkdir(dirname(join(work, name)), { recursive: true });
        await writeFile(join(work, name), content);
      }
      await git(work, ["add", "--all"]);
      await git(work, ["commit", "--quiet", "--allow-empty", "-m", message]);
      await git(work, ["push", "--quiet", "--force", "origin", `HEAD:refs/heads/${branch}`]);
      return git(work, ["rev-parse", "HEAD"]);
    },
    branchHead: (branch) =>
      git(path, ["rev-parse", "--verify", "--quiet", `refs/heads/${branch}`]).catch(
        () => undefined,
      ),
    refs: () => git(path, ["for-each-ref", "--format=%(refname) %(objectname)"]),
    treeOf: (commit) => git(path, ["rev-parse", `${commit}^{tree}`]),
    remove: () => rm(root, { recursive: true, force: true }),
  };
  await origin.commit("main", { "README.md": "# app\n" }, "first");
  return origin;
}
