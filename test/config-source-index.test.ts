/** indexSource on its own: the line of every attribute and block header, nested as written. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import hcl from 'hcl2-parser';

import { indexSource, type SourceEntry } from '../src/config/source-index.js';

/** One row per entry: `line indent name labels`, so a case reads like the file it describes. */
function outline(entries: readonly SourceEntry[], depth = 0): string[] {
  return entries.flatMap((entry) => [
    `${entry.line} ${'  '.repeat(depth)}${entry.kind === 'block' ? 'block' : 'attr'} ${[entry.name, ...entry.labels.map((label) => JSON.stringify(label))].join(' ')}`,
    ...outline(entry.body, depth + 1),
  ]);
}

/** The scanner reads only text the parser accepted, so every case must be valid HCL first. */
function indexOf(text: string): string[] {
  const [value, error] = hcl.parseToObject(text) as [unknown, unknown];
  assert.ok(!error && value !== null, `hcl2-parser refuses the case:\n${text}`);
  return outline(indexSource(text));
}

describe('indexSource', () => {
  test('attributes and nested blocks, with their lines', () => {
    const text = `base_url = "https://auth.example.org"

client "webapp" {
  audience = ["x"]
  pkce {
    required = true
  }
  scopes = ["openid"]
}
tls {
}
`;
    assert.deepEqual(indexOf(text), [
      '1 attr base_url',
      '3 block client "webapp"',
      '4   attr audience',
      '5   block pkce',
      '6     attr required',
      '8   attr scopes',
      '10 block tls',
    ]);
  });

  test('labels: none, several, quoted with escapes, or bare identifiers', () => {
    const text = `a {
}
b "one" "two" {
}
c "say \\"hi\\" {" {
}
d bare {
}
`;
    assert.deepEqual(indexOf(text), ['1 block a', '3 block b "one" "two"', '5 block c "say \\"hi\\" {"', '7 block d "bare"']);
  });

  test('URI labels holding #, // and /* are labels, not comments (resource_server "https://...")', () => {
    const text = `resource_server "https://docs.example.org/#v2" {
  secret_file = "a"
}
resource_server "https://api.example.org/*/x" { secret_file = "b" }
resource_server "urn:x:y" {
}
`;
    assert.deepEqual(indexOf(text), [
      '1 block resource_server "https://docs.example.org/#v2"',
      '2   attr secret_file',
      '4 block resource_server "https://api.example.org/*/x"',
      '4   attr secret_file',
      '5 block resource_server "urn:x:y"',
    ]);
  });

  test('one-line blocks end at their brace, and the next entry is found', () => {
    assert.deepEqual(indexOf(`tls { mode = "proxy" }\nstate { path = "x.db" }\nlisten = "1"\n`), [
      '1 block tls',
      '1   attr mode',
      '2 block state',
      '2   attr path',
      '3 attr listen',
    ]);
  });

  test('comments of every kind hide what they hold', () => {
    const text = `# fake = 1 {
a = 1 // fake = 2 }
/* fake {
   b = 3
} */
b = [ # }
  1, /* ] } */ 2,
]
// c {
c = 3
`;
    assert.deepEqual(indexOf(text), ['2 attr a', '6 attr b', '10 attr c']);
  });

  test('strings holding braces, brackets, = and comment marks are values, not structure', () => {
    const text = `a = "} { = ] ["
b = "# not a comment // nor this /* nor this"
c = "x = 1"
d {
  e = "}"
  f = ["{", "}}", "\\"}"]
}
g = 1
`;
    assert.deepEqual(indexOf(text), ['1 attr a', '2 attr b', '3 attr c', '4 block d', '5   attr e', '6   attr f', '8 attr g']);
  });

  test('heredocs, plain and indented, may hold braces and lines that look like entries', () => {
    const text = `motd = <<EOT
}
client "fake" {
  x = 1
EOT
banner = <<-END
    { y = 2
    END
after = 3
`;
    assert.deepEqual(indexOf(text), ['1 attr motd', '6 attr banner', '9 attr after']);
  });

  test('template interpolations may hold strings, braces and newlines', () => {
    const text = `a = "\${upper("}")} and %{ if true }{%{ endif }"
b = "$\${not} %%{not}"
c = "\${ {
  k = "}"
} }"
d = "\${
  "}"
}"
e = 5
`;
    assert.deepEqual(indexOf(text), ['1 attr a', '2 attr b', '3 attr c', '6 attr d', '9 attr e']);
  });

  test('multi-line lists and objects belong to their attribute', () => {
    const text = `audience = [
  "https://api.example.org/",
  "billing",
]
object = {
  inner = "x"
  deeper = { z = 1 }
}
last = true
`;
    assert.deepEqual(indexOf(text), ['1 attr audience', '5 attr object', '9 attr last']);
  });

  test('CRLF line ends and a byte order mark keep lines right', () => {
    assert.deepEqual(indexOf('\uFEFFa = 1\r\nb {\r\n  c = "}"\r\n}\r\nd = 2\r\n'), ['1 attr a', '2 block b', '3   attr c', '5 attr d']);
  });
});
