// Why a scanner: hcl2-parser returns values only, never a position. @cdktf/hcl2json gives
// positions only in syntax-error messages and in getExpressionAst, which parses one expression,
// not a body of attributes and blocks. Neither says on which line a name stands, which DESIGN §3
// asks of every message. So this reads text the parser already accepted, for line numbers only.

/** An attribute or a block header as written in the file. */
export interface SourceEntry {
  readonly kind: 'attribute' | 'block';
  readonly name: string;
  /** A block's labels: `client "webapp"` has ["webapp"]; none for an attribute. */
  readonly labels: readonly string[];
  readonly line: number;
  /** A block's own attributes and blocks, in file order; none for an attribute. */
  readonly body: readonly SourceEntry[];
}

const IDENTIFIER = /[\p{ID_Start}_][\p{ID_Continue}-]*/uy;
const SPACE = /(?:\s|#.*|\/\/.*|\/\*[^]*?\*\/)*/y;
const SPACE_IN_LINE = /(?:[ \t\r]|#.*|\/\/.*|\/\*[^]*?\*\/)*/y;
const HEREDOC = /<<-?([\p{ID_Start}_][\p{ID_Continue}-]*)\r?\n/uy;
// A quoted string's text up to its closing quote or an interpolation; $${ and %%{ are literal.
const STRING_TEXT = /(?:[^"\\$%]|\\[^]|\$\$\{|%%\{|[$%](?!\{))*/y;

/** The top-level attributes and blocks of HCL text that hcl2-parser accepted, in file order. */
export function indexSource(text: string): readonly SourceEntry[] {
  let pos = 0;
  const skip = (pattern: RegExp): RegExpExecArray | null => {
    pattern.lastIndex = pos;
    const found = pattern.exec(text);
    if (found) pos = pattern.lastIndex;
    return found;
  };
  // Entries come in file order, so newlines are counted once, front to back.
  let counted = 0;
  let lines = 1;
  const lineAt = (at: number): number => {
    for (; counted < at; counted += 1) if (text[counted] === '\n') lines += 1;
    return lines;
  };

  // A body's entries, then past its closing brace (or to the end of the text, for the file).
  const body = (): SourceEntry[] => {
    const entries: SourceEntry[] = [];
    for (skip(SPACE); pos < text.length && text[pos] !== '}'; skip(SPACE)) {
      const line = lineAt(pos);
      const name = skip(IDENTIFIER)?.[0];
      if (name === undefined) {
        pos += 1;
        continue;
      }
      skip(SPACE_IN_LINE);
      if (text[pos] === '=') {
        pos += 1;
        expression(false);
        entries.push({ kind: 'attribute', name, labels: [], line, body: [] });
      } else {
        const labels = blockLabels();
        pos += 1;
        entries.push({ kind: 'block', name, labels, line, body: body() });
      }
    }
    pos += 1;
    return entries;
  };

  const blockLabels = (): string[] => {
    const labels: string[] = [];
    for (let start = pos; ; start = pos) {
      if (text[pos] === '"') labels.push(unquote(quoted()));
      else if (skip(IDENTIFIER)) labels.push(text.slice(start, pos));
      else return labels;
      skip(SPACE_IN_LINE);
    }
  };

  // A value: up to the newline that ends it, or (not taken) the `}` ending a one-line block or an interpolation.
  const expression = (inTemplate: boolean): void => {
    let depth = 0;
    for (;;) {
      skip(SPACE_IN_LINE);
      const c = text[pos];
      if (c === undefined || (depth === 0 && (')]}'.includes(c) || (c === '\n' && !inTemplate)))) return;
      if (c === '"') quoted();
      else if (!heredoc()) {
        if ('([{'.includes(c)) depth += 1;
        else if (')]}'.includes(c)) depth -= 1;
        pos += 1;
      }
    }
  };

  // From an opening quote past its closing one, through ${...} and %{...} interpolations; returns the literal.
  const quoted = (): string => {
    const start = pos;
    pos += 1;
    for (skip(STRING_TEXT); text[pos] === '$' || text[pos] === '%'; skip(STRING_TEXT)) {
      pos += 2;
      expression(true);
      pos += 1;
    }
    pos += 1;
    return text.slice(start, pos);
  };

  // Past <<EOT or <<-EOT to the line holding only its marker; false when no heredoc starts here.
  const heredoc = (): boolean => {
    const marker = skip(HEREDOC)?.[1];
    if (marker === undefined) return false;
    const closing = new RegExp(`^[ \\t]*${marker}[ \\t]*\\r?$`, 'gmu');
    closing.lastIndex = pos;
    pos = closing.exec(text) ? closing.lastIndex : text.length;
    return true;
  };

  return body();
}

function unquote(literal: string): string {
  try {
    return JSON.parse(literal) as string;
  } catch {
    return literal.slice(1, -1);
  }
}
