import { spawn } from "node:child_process";
import https from "node:https";
import type { AddressInfo } from "node:net";

/** A git smart-HTTP server over TLS that requires one user name and password. */
export interface GitHttpsServer {
  /** https://127.0.0.1:<port>/ : append the repository's path under `root`. */
  readonly url: string;
  /** Requests refused for a missing or wrong credential. */
  readonly refused: () => number;
  close(): Promise<void>;
}

/**
 * Serves the repositories under `root` with `git http-backend` (CGI), fetch
 * and push, behind HTTP basic authentication: the way a code host checks the
 * control plane's credential.
 */
export async function startGitHttpsServer(
  root: string,
  tls: { certPem: string; keyPem: string },
  user: string,
  password: string,
): Promise<GitHttpsServer> {
  const expected = `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;
  let refused = 0;
  const server = https.createServer({ cert: tls.certPem, key: tls.keyPem }, (req, res) => {
    if (req.headers.authorization !== expected) {
      refused++;
      res.writeHead(401, { "www-authenticate": 'Basic realm="git"' });
      return res.end();
    }
    const url = new URL(req.url ?? "/", "https://git.invalid");
    const cgi = spawn("git", ["http-backend"], {
      env: {
        ...process.env,
        GIT_PROJECT_ROOT: root,
        GIT_HTTP_EXPORT_ALL: "1",
        PATH_INFO: decodeURIComponent(url.pathname),
        QUERY_STRING: url.search.slice(1),
        REQUEST_METHOD: req.method ?? "GET",
        CONTENT_TYPE: req.headers["content-type"] ?? "",
        HTTP_CONTENT_ENCODING: req.headers["content-encoding"] ?? "",
        GIT_PROTOCOL: String(req.headers["git-protocol"] ?? ""),
        REMOTE_USER: user,
        REMOTE_ADDR: "127.0.0.1",
      },
    });
    req.pipe(cgi.stdin);
    let head = Buffer.alloc(0);
    let headersDone = false;
    cgi.stdout.on("data", (chunk: Buffer) => {
      if (headersDone) return void res.write(chunk);
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end === -1) return;
      headersDone = true;
      let status = 200;
      for (const line of head.subarray(0, end).toString("latin1").split("\r\n")) {
        const i = line.indexOf(":");
        const name = line.slice(0, i).trim().toLowerCase();
        const value = line.slice(i + 1).trim();
        if (name === "status") status = Number.parseInt(value, 10);
        else if (name) res.setHeader(name, value);
      }
      res.writeHead(status);
      res.write(head.subarray(end + 4));
    });
    cgi.on("close", () => res.end());
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `https://127.0.0.1:${port}/`,
    refused: () => refused,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
