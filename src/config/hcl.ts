import hcl from 'hcl2-parser';
import type { ConfigProblem } from './types.js';

export type HclBody = Record<string, unknown>;

export type HclResult = { readonly body: HclBody } | { readonly problems: readonly ConfigProblem[] };

// A file name without regex or colon trouble, swapped back for the real path in messages.
const PLACEHOLDER = 'pinpoint-config.hcl';
const DIAGNOSTIC = new RegExp(`${escapeRegExp(PLACEHOLDER)}:(\\d+),(\\d+)-(?:\\d+,)?\\d+: `, 'g');

/** Parses HCL text into hcl2json's object shape, or says where and why the syntax is wrong. */
export async function parseHcl(file: string, text: string): Promise<HclResult> {
  const body = parseWithHcl2Parser(text);
  if (body) return { body };
  return { problems: await syntaxProblems(file, text) };
}

function parseWithHcl2Parser(text: string): HclBody | undefined {
  try {
    const [value, error] = hcl.parseToObject(text) as [unknown, unknown];
    if (error || value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
    return value as HclBody;
  } catch {
    return undefined;
  }
}

// hcl2-parser rejects bad text without saying why; @cdktf/hcl2json (the same HCL library) does.
async function syntaxProblems(file: string, text: string): Promise<ConfigProblem[]> {
  let message: string;
  try {
    const { parse } = await import('@cdktf/hcl2json');
    await parse(PLACEHOLDER, text);
    return [{ file, message: 'the HCL parser rejected this file without saying why; check its syntax' }];
  } catch (error) {
    message = error instanceof Error ? error.message : String(error);
  }
  const problems = splitDiagnostics(message).map(({ line, column, reason }) => ({ file, line, column, message: reason }));
  return problems.length > 0 ? problems : [{ file, message: `syntax error: ${message}` }];
}

function splitDiagnostics(message: string): { line: number; column: number; reason: string }[] {
  const starts = [...message.matchAll(DIAGNOSTIC)];
  const seen = new Set<string>();
  const diagnostics: { line: number; column: number; reason: string }[] = [];
  starts.forEach((start, i) => {
    const from = (start.index ?? 0) + start[0].length;
    const to = starts[i + 1]?.index ?? message.length;
    const reason = message
      .slice(from, to)
      .replace(/\]\s*$/, '')
      .trim()
      .replaceAll(new RegExp(`${escapeRegExp(PLACEHOLDER)}:(\\d+),\\d+(?:-(?:\\d+,)?\\d+)?`, 'g'), 'line $1');
    const key = `${start[1]}:${start[2]}:${reason}`;
    if (seen.has(key)) return;
    seen.add(key);
    diagnostics.push({ line: Number(start[1]), column: Number(start[2]), reason });
  });
  return diagnostics;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
