import { describe, expect, it } from "vitest";
import { artifactNameProblem, checkDigest, checkMediaType } from "../../src/artifacts/names.js";

describe("artifact names", () => {
  it.each([
    "a",
    "reports/junit.xml",
    "dist/app-1.2.3.tar.gz",
    "with space/é.txt",
    ".hidden",
    "a..b",
    "x".repeat(255),
  ])("%j is a name", (name) => {
    expect(artifactNameProblem(name)).toBeUndefined();
  });
  it.each([
    ["/abs", "absolute"],
    ["..", '".." segment'],
    ["a/..", '".." segment'],
    [".", '"." segment'],
    ["a//b", "empty segment"],
    ["a/", "empty segment"],
    ["a\\b", "backslash"],
    ["a\nb", "control character"],
    ["a\u0000b", "control character"],
    ["invoice\u202Efdp.exe", "U+202E, an invisible or bidirectional control character"],
    ["a\u200Bb", "U+200B"],
    ["a\u2066b", "U+2066"],
    ["a\u0085b", "U+0085"],
    ["a\u2028b", "U+2028"],
    ["\uFEFFa", "U+FEFF"],
    ["x".repeat(256), "segment longer than 255 bytes"],
    [`${"é".repeat(513)}`, "longer than 1024 bytes"],
  ])("%j is refused (%s)", (name, problem) => {
    expect(artifactNameProblem(name)).toContain(problem);
  });
});

describe("digests and media types", () => {
  it("a digest is sha256: and 64 lower-case hex digits", () => {
    expect(checkDigest(`sha256:${"a".repeat(64)}`)).toBe(`sha256:${"a".repeat(64)}`);
    for (const bad of [
      `sha256:${"A".repeat(64)}`,
      `sha256:${"a".repeat(63)}`,
      `sha512:${"a".repeat(64)}`,
      "a".repeat(64),
      "",
    ])
      expect(() => checkDigest(bad)).toThrow(
        'is not "sha256:" followed by 64 lower-case hex digits',
      );
  });
  it("a media type defaults to application/octet-stream and must look like one", () => {
    expect(checkMediaType("")).toBe("application/octet-stream");
    expect(checkMediaType("text/plain; charset=utf-8")).toBe("text/plain; charset=utf-8");
    for (const bad of ["text", "text/plain\r\nx-evil: 1", "a/b/c", "/plain"])
      expect(() => checkMediaType(bad)).toThrow("is not a media type");
  });
});
