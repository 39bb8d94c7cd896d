/** http/templates.ts: every value a page shows is escaped, and the allow/deny form is one template used by both pages that decide. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  consentPage,
  decisionForm,
  deviceApprovalPage,
  deviceEntryPage,
  logoutConfirmationPage,
  signInPage,
  type ConsentView,
  type DeviceApprovalView,
} from '../src/http/templates.js';

const SCRIPT = '<script>alert("x")</script>';
const ESCAPED = '&#60;script&#62;alert(&#34;x&#34;)&#60;/script&#62;';

const consent: ConsentView = {
  basePath: '/auth',
  csrf: 'csrf-token',
  loginId: 'login-id',
  clientName: SCRIPT,
  origin: { kind: 'claimed', host: SCRIPT },
  returnsTo: '127.0.0.1:33418',
  scope: ['mcp', SCRIPT],
  resources: [SCRIPT],
  signedInAs: SCRIPT,
};

const approval: DeviceApprovalView = {
  basePath: '/auth',
  csrf: 'csrf-token',
  client: SCRIPT,
  userCode: 'WDJBMJHT',
  shownCode: 'WDJB-MJHT',
  scope: ['openid'],
  signedInAs: 'Alice',
};

describe('page templates', () => {
  test('a client name, scope, host and person with markup are shown escaped on the consent page', () => {
    const page = consentPage(consent).text;
    assert.ok(!page.includes('<script>'), page);
    assert.ok(page.includes(`Allow ${ESCAPED}?`));
    assert.ok(page.includes(`It says it is from <strong>${ESCAPED}</strong>`));
    assert.ok(page.includes(`<li><code>${ESCAPED}</code></li>`));
    assert.ok(page.includes(`Signed in as ${ESCAPED}.`));
  });

  test('typed values are escaped in attributes: username, user code, logout state, upstream names', () => {
    const typed = '"><script>';
    const signIn = signInPage({ basePath: '', csrf: 'c', loginId: 'l', localUsers: true, upstreams: [SCRIPT], username: typed, message: SCRIPT }).text;
    const entry = deviceEntryPage('', 'c', typed, SCRIPT).text;
    const logout = logoutConfirmationPage({ basePath: '', csrf: 'c', clientName: SCRIPT, state: typed, postLogoutRedirectUri: 'https://app.example/"x' }).text;
    for (const page of [signIn, entry, logout]) assert.ok(!page.includes('<script>'), page);
    assert.ok(signIn.includes('name="username" autocomplete="username" autocapitalize="none" spellcheck="false" required value="&#34;&#62;&#60;script&#62;"'));
    assert.ok(signIn.includes(`Sign in with ${ESCAPED}`));
    assert.ok(signIn.includes('upstream=%3Cscript%3Ealert(%22x%22)%3C%2Fscript%3E'));
    assert.ok(entry.includes('name="user_code" value="&#34;&#62;&#60;script&#62;"'));
    assert.ok(logout.includes('<input type="hidden" name="state" value="&#34;&#62;&#60;script&#62;">'));
    assert.ok(logout.includes('value="https://app.example/&#34;x"'));
  });

  test('the sign-in page without local users has no password form, and says when it is for a device', () => {
    const page = signInPage({ basePath: '', csrf: 'c', loginId: 'l', localUsers: false, upstreams: ['corp'], username: '' }).text;
    assert.ok(!page.includes('name="password"'));
    assert.ok(page.includes('to approve a device'));
    assert.ok(page.includes('href="/federation/start?login=l&amp;upstream=corp"'));
  });

  test('the consent page and the device approval page both carry the one allow/deny form', () => {
    const consentForm = decisionForm('/auth/consent', 'csrf-token', { name: 'login', value: 'login-id' }, 'allow', 'Allow').text;
    const approvalForm = decisionForm('/auth/device', 'csrf-token', { name: 'user_code', value: 'WDJBMJHT' }, 'approve', 'Approve').text;
    assert.ok(consentPage(consent).text.includes(consentForm));
    assert.ok(deviceApprovalPage(approval).text.includes(approvalForm));
    for (const form of [consentForm, approvalForm]) {
      assert.ok(form.includes('<input type="hidden" name="csrf" value="csrf-token">'));
      assert.ok(form.includes('<button type="submit" name="decision" value="deny" class="secondary">Deny</button>'));
    }
    assert.ok(consentForm.includes('<form method="post" action="/auth/consent">'));
    assert.ok(approvalForm.includes('<button type="submit" name="decision" value="approve">Approve</button>'));
  });

  test('the device approval page escapes the client id and shows the code as the device does', () => {
    const page = deviceApprovalPage(approval).text;
    assert.ok(!page.includes('<script>'));
    assert.ok(page.includes(`<strong>${ESCAPED}</strong> asks to act on your behalf.`));
    assert.ok(page.includes('<code>WDJB-MJHT</code>'));
  });
});
