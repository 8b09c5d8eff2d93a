import { describe, expect, it } from "vitest";
import { mayHoldUnsafeInteger } from "../../src/protocol/json/wire.js";

describe("mayHoldUnsafeInteger", () => {
  it("finds a run of 16 digits wherever it starts, and nothing shorter", () => {
    const filler = 'x"{:,-.e ';
    for (let length = 14; length <= 18; length++) {
      for (let at = 0; at < 40; at++) {
        for (const pad of [0, 1, 17]) {
          const digits = "1234567890123456789".slice(0, length);
          const text = "a".repeat(at) + digits + filler.repeat(pad);
          expect(mayHoldUnsafeInteger(text), `${length} digits at ${at}, ${pad} fillers`).toBe(
            length >= 16,
          );
        }
      }
    }
  });

  it("agrees with /\\d{16}/ on random texts of digits and other characters", () => {
    let seed = 42;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let n = 0; n < 3000; n++) {
      const length = Math.floor(random() * 200);
      let text = "";
      const digitShare = random();
      for (let i = 0; i < length; i++)
        text +=
          random() < digitShare
            ? String(Math.floor(random() * 10))
            : 'ab"é😀,'[Math.floor(random() * 6)];
      expect(mayHoldUnsafeInteger(text), JSON.stringify(text)).toBe(/\d{16}/.test(text));
    }
  });
});
