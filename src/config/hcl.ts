import hcl from 'hcl2-parser';
import { isLabeledBlock, isSingleBlock, type HclBody } from './block-types.js';
import { indexSource, type SourceEntry } from './source-index.js';
import type { ConfigProblem } from './types.js';

/** A config file as read: its values, and where each name is written; or why it cannot be read. */
export type HclFile = { readonly body: HclBody; readonly source: readonly SourceEntry[] } | { readonly problems: readonly ConfigProblem[] };

// A file name without regex or colon trouble, swapped back for the real path in messages.
const PLACEHOLDER = 'pinpoint-config.hcl';
const DIAGNOSTIC = new RegExp(`${escapeRegExp(PLACEHOLDER)}:(\\d+),(\\d+)-(?:\\d+,)?\\d+: `, 'g');

/**
 * Reads HCL text the one way the config is read: values from hcl2-parser, the line of each name
 * from the source index, and, only when hcl2-parser refuses the text, the reason from @cdktf/hcl2json.
 */
export async function readHcl(file: string, text: string): Promise<HclFile> {
  const body = parseWithHcl2Parser(text);
  if (body) return { body, source: indexSource(text) };
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
  if (problems.length > 0) return problems;
  return [conversionProblem(file, text, message)];
}

// Valid HCL that hcl2json cannot shape into JSON: blocks of one type with different numbers of labels.
function conversionProblem(file: string, text: string, message: string): ConfigProblem {
  const reason = message.replace(/^(?:Error: )?(?:parse config: )?(?:convert[^:]*: )+/, '');
  const type = /for "([^"]+)" block/.exec(reason)?.[1] ?? /Block to JSON: ([A-Za-z_][\w-]*)/.exec(reason)?.[1];
  if (type === undefined) return { file, message: `cannot read this file: ${reason}` };
  const blocks = indexSource(text).filter((entry) => entry.kind === 'block' && entry.name === type);
  const expected = isSingleBlock(type) ? 0 : isLabeledBlock(type) ? 1 : blocks[0]?.labels.length;
  const odd = blocks.find((entry) => entry.labels.length !== expected) ?? blocks[0];
  const shape = expected === 0 ? `${type} { ... }` : expected === 1 ? `${type} "name" { ... }` : `the same labels on every ${type} block`;
  return { file, ...(odd && { line: odd.line }), block: type, message: `every ${type} block must be written as ${shape} (${reason})` };
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
