// Lint covers the project's own code; generated code under gen/ is excluded.
import js from "@eslint/js";
import tseslint from "typescript-eslint";
import globals from "globals";

export default tseslint.config(
  { ignores: ["gen/**", "dist/**", "node_modules/**", "data/**", "certs/**", "bench/results/**"] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      globals: {
        process: "readonly",
        console: "readonly",
        Buffer: "readonly",
        URL: "readonly",
        setTimeout: "readonly",
        clearTimeout: "readonly",
        setInterval: "readonly",
        clearInterval: "readonly",
        AbortController: "readonly",
        AbortSignal: "readonly",
        TextEncoder: "readonly",
        TextDecoder: "readonly",
        performance: "readonly",
        crypto: "readonly",
        setImmediate: "readonly",
        structuredClone: "readonly",
        fetch: "readonly",
      },
    },
    rules: {
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_" },
      ],
      "@typescript-eslint/consistent-type-imports": "error",
      "no-console": "off",
    },
  },
  // The layering (DESIGN.md): domain folders hold the rules and never reach out to the edges;
  // the runner agent is a client of the protocol and never links the server's code. protocol/
  // holds the rules both sides of the wire apply (e.g. which env names look secret).
  {
    files: [
      "src/{broker,streams,code,artifacts,inventory,identity,store,protocol,ops,events,secrets}/**/*.ts",
    ],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^(\\.\\./)+(api|server|cli|runner)/",
              message:
                "Domain code must not import the transport (api/, server/), the CLI or the runner agent: move the shared piece into the domain, or pass it in from the composition root (src/server/).",
            },
            {
              regex: "^(\\.\\./)+gen/",
              message:
                "Domain code must not import generated protocol code (gen/): decode and encode wire messages in src/api/ and hand the domain plain types.",
            },
          ],
        },
      ],
    },
  },
  // The API layer decodes, calls a domain facade and encodes: it never holds the database. A
  // handler that needs a query asks for a facade method (broker, streams, inventory, ...) bound in
  // src/server/bind-services.ts.
  {
    files: ["src/api/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          paths: [
            {
              name: "kysely",
              message: "src/api/ does not query the database: call a domain facade.",
            },
            { name: "pg", message: "src/api/ does not query the database: call a domain facade." },
          ],
          patterns: [
            {
              regex: "^(\\.\\./)+store/(database|transaction|watched-pool|listen-client)\\.js$",
              message:
                "src/api/ does not hold the database: call a domain facade bound in src/server/bind-services.ts.",
            },
          ],
        },
      ],
    },
  },
  {
    files: ["src/runner/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^(\\.\\./)+(api|server|store)/",
              message:
                "The runner agent speaks the protocol over the wire: it must not import the control plane's api/, server/ or store/ code.",
            },
          ],
        },
      ],
    },
  },
  // The dashboard's web app runs in the browser: browser globals, and it reaches the control plane
  // only through the generated clients over the proxy (src/dashboard/web/clients.ts), never the
  // server's, the CLI's or node's code. The dashboard's node side (server/) never imports the web app.
  {
    files: ["src/dashboard/web/**/*.{ts,tsx}"],
    languageOptions: { globals: { ...globals.browser } },
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            { regex: "^node:", message: "The web app runs in the browser: no node modules." },
            // protocol/ is allowed: the wire's rules both sides apply (e.g. how a log entry reads as text), node-free.
            {
              regex:
                "^(\\.\\./)+(api|server|cli|runner|broker|store|identity|events|ops|secrets|streams|code|artifacts|inventory)/",
              message:
                "The web app calls the control plane through the generated clients (src/dashboard/web/clients.ts), not its code.",
            },
            {
              regex: "^@connectrpc/connect-node",
              message: "The web app uses @connectrpc/connect-web (clients.ts).",
            },
          ],
        },
      ],
    },
  },
  {
    files: ["src/dashboard/server/**/*.ts"],
    rules: {
      "no-restricted-imports": [
        "error",
        {
          patterns: [
            {
              regex: "^\\.\\./web/",
              message:
                "The dashboard's server serves the built web app (dist/dashboard/); it does not import its sources.",
            },
            {
              regex: "^(\\.\\./)+(api|server|broker|store|runner)/",
              message:
                "The dashboard is a client of the control plane: it forwards calls, it does not link the server's code.",
            },
          ],
        },
      ],
    },
  },
);
