import type { ConfigProblem } from './types.js';

/** Thrown by loadConfig when the file is unusable; carries every problem found, not just the first. */
export class ConfigInvalid extends Error {
  readonly problems: readonly ConfigProblem[];
  readonly warnings: readonly string[];

  constructor(problems: readonly ConfigProblem[], warnings: readonly string[] = []) {
    super(`invalid configuration:\n${problems.map(formatProblem).join('\n')}`);
    this.name = 'ConfigInvalid';
    this.problems = Object.freeze([...problems]);
    this.warnings = Object.freeze([...warnings]);
  }
}

/** `file:line[:column]: block: message`, the form editors and terminals link to. */
export function formatProblem(problem: ConfigProblem): string {
  let place = problem.file;
  if (problem.line !== undefined) place += `:${problem.line}`;
  if (problem.line !== undefined && problem.column !== undefined) place += `:${problem.column}`;
  return problem.block ? `${place}: ${problem.block}: ${problem.message}` : `${place}: ${problem.message}`;
}
