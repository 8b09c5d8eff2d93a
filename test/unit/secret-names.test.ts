import { describe, expect, it } from "vitest";
import {
  looksSecret,
  secretNameParts,
  secretNameSuffixes,
  secretNameWords,
} from "../../src/protocol/secret-names.js";

describe("looksSecret: which env names look like they hold a secret", () => {
  it("a name containing TOKEN, SECRET, PASSWORD, PASSWD, KEY or CREDENTIAL, in any case, anywhere", () => {
    for (const name of [
      "GITHUB_TOKEN",
      "token",
      "MySecret",
      "DB_PASSWORD",
      "PASSWD",
      "AWS_SECRET_ACCESS_KEY",
      "API_KEY",
      "keyring",
      "GOOGLE_APPLICATION_CREDENTIALS",
      "credential_file",
      "NPM_TOKEN_2",
    ]) {
      expect(looksSecret(name), name).toBe(true);
    }
  });

  it(
    "a name that ends with AUTH or has AUTH as a word of its own, or holds " +
      "AUTHORIZATION, but not one where AUTH is inside a word",
    () => {
      for (const name of [
        "AUTH",
        "auth",
        "BASIC_AUTH",
        "GitAuth",
        "GIT_AUTH_HEADER",
        "AUTH_MODE",
        "HTTP_AUTHORIZATION",
      ])
        expect(looksSecret(name), name).toBe(true);
      for (const name of ["AUTHOR", "AUTHOR_NAME", "OAUTH_CLIENT_ID"])
        expect(looksSecret(name), name).toBe(false);
    },
  );

  it("ordinary names are not secret-looking", () => {
    for (const name of ["PATH", "HOME", "CI", "GIT_BRANCH", "LANG", "NODE_ENV", ""])
      expect(looksSecret(name), name).toBe(false);
  });

  it(
    "errs on the side of masking: a word that merely contains a part " +
      "(MONKEY, KEYBOARD_LAYOUT) looks secret too",
    () => {
      for (const name of ["MONKEY", "KEYBOARD_LAYOUT", "TOKENIZER"])
        expect(looksSecret(name), name).toBe(true);
    },
  );

  it("the list is written once, upper case, as documented", () => {
    expect(secretNameParts).toEqual([
      "TOKEN",
      "SECRET",
      "PASSWORD",
      "PASSWD",
      "KEY",
      "CREDENTIAL",
      "AUTHORIZATION",
    ]);
    expect(secretNameSuffixes).toEqual(["AUTH"]);
    expect(secretNameWords).toEqual(["AUTH"]);
  });
});
