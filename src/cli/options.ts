import { InvalidArgumentError } from "commander";

/** A commander argument parser for whole numbers in a range. */
export function integerIn(name: string, min: number, max: number): (value: string) => number {
  return (value) => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value) || n < min || n > max) throw new InvalidArgumentError(`${name} must be a whole number from ${min} to ${max}; got ${JSON.stringify(value)}`);
    return n;
  };
}

/** Collects a repeatable option into an array. */
export function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}
