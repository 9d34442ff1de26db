#!/usr/bin/env node
// Headless-browser checks for wasmspy's outputs.
//
//   node check.js speedscope PROFILE.json EXPECTED_NAME SCREENSHOT.png
//   node check.js svg        FILE.svg     EXPECTED_NAME SCREENSHOT.png
//   node check.js annotate   FILE.html    EXPECTED_NAME SCREENSHOT.png
//
// speedscope: opens the real speedscope app (the release build shipped in the
//   `speedscope` npm package) from file://, loads PROFILE.json the same way the
//   `speedscope` CLI does (a temp JS file calling speedscope.loadFileFromBase64,
//   referenced by `#localProfilePath=`), switches to the Sandwich view (a DOM
//   table of function names), types EXPECTED_NAME into the app's search box and
//   checks that a table row shows exactly that name. Fails on the app's import
//   error screen, on an alert() (e.g. "Unrecognized format!"), on an uncaught
//   page exception, or if the name is not shown.
// svg: opens FILE.svg from file:// (its embedded JS runs), checks the document
//   is an <svg> with <text> elements and that EXPECTED_NAME occurs in the text; prints the
//   colour its frame is drawn in, where it has one
//   content of a <title> or <text> element; fails on an uncaught page exception.
//
// annotate: opens `wasmspy annotate -o FILE.html`'s page, follows the function list's link
//   named EXPECTED_NAME to its section, finds the row with the most flat samples
//   (`data-flat`), checks it is drawn in another colour than a row without samples, and
//   prints that row's Wasm instruction (`hottest=...`); fails on a page exception.
//
// Either way a PNG screenshot is written, the line `ok MODE: found NAME` is
// printed and the exit code is 0; otherwise a reason goes to stderr, exit 1
// (exit 2 for bad usage). Everything is bounded by one 30 s deadline and the
// browser is always closed. No network is used: only file:// URLs.
//
// Browser: $CHROMIUM_PATH, else /usr/bin/chromium (Debian's `chromium`
// package; see install.sh).

'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { pathToFileURL } = require('node:url');
const { chromium } = require('playwright-core');

const TOTAL_MS = 28000; // hard limit for the whole check, browser start included
const START = Date.now();
const remaining = () => Math.max(1000, TOTAL_MS - 2000 - (Date.now() - START));

function usage() {
  process.stderr.write(
    'usage: node check.js speedscope PROFILE.json EXPECTED_NAME SCREENSHOT.png\n' +
      '       node check.js svg FILE.svg EXPECTED_NAME SCREENSHOT.png\n' +
      '       node check.js annotate FILE.html EXPECTED_NAME SCREENSHOT.png\n',
  );
  process.exit(2);
}

class CheckFailure extends Error {}
const fail = msg => {
  throw new CheckFailure(msg);
};

const SPEEDSCOPE_DIR = path.join(
  path.dirname(require.resolve('speedscope/package.json')),
  'dist',
  'release',
);

async function checkSpeedscope(page, errors, profilePath, name, shot, tmpDir) {
  const indexHtml = path.join(SPEEDSCOPE_DIR, 'index.html');
  if (!fs.existsSync(indexHtml)) fail(`speedscope release build not found at ${indexHtml}`);

  // Same mechanism as node_modules/speedscope/bin/cli.mjs.
  const data = fs.readFileSync(profilePath);
  const jsPath = path.join(tmpDir, 'profile.js');
  fs.writeFileSync(
    jsPath,
    `speedscope.loadFileFromBase64(${JSON.stringify(path.basename(profilePath))}, ` +
      `${JSON.stringify(data.toString('base64'))})`,
  );
  // The app turns this into `file:///${localProfilePath}`; the hash value is
  // URI-decoded and must not contain '&' or '=' (tmpDir comes from mkdtemp).
  const url =
    pathToFileURL(indexHtml).href +
    `#localProfilePath=${encodeURIComponent(jsPath)}&view=sandwich`;

  let alertText = null;
  let onAlert;
  const alerted = new Promise(r => (onAlert = r));
  page.on('dialog', d => {
    alertText = d.message();
    d.dismiss().catch(() => {});
    onAlert('alert');
  });

  await page.goto(url, { waitUntil: 'load', timeout: remaining() });

  // Wait until the profile is shown (sandwich table has rows), or an error.
  const outcome = await Promise.race([alerted, page
    .waitForFunction(
      () => {
        const text = document.body ? document.body.innerText : '';
        if (text.includes('Something went wrong')) return 'error-screen';
        if (document.querySelector('table tr td')) return 'loaded';
        return false;
      },
      null,
      { timeout: remaining(), polling: 100 },
    )
    .then(h => h.jsonValue())
    .catch(e => (alertText !== null ? 'alert' : `timeout (${e.message.split('\n')[0]})`))]);

  if (alertText !== null) fail(`speedscope showed an alert: ${JSON.stringify(alertText)}`);
  if (outcome === 'error-screen') {
    fail(`speedscope could not import ${profilePath} ("Something went wrong." screen)` +
      (errors.length ? `; page errors: ${errors.join(' | ')}` : ''));
  }
  if (outcome !== 'loaded') {
    const text = (await page.evaluate(() => document.body && document.body.innerText).catch(() => '')) || '';
    fail(`speedscope did not show the sandwich table: ${outcome}; page text: ` +
      JSON.stringify(text.slice(0, 300)));
  }

  // The sandwich table's cells: the tables styled as its header (the one with
  // "Symbol Name"), not the profile selector's (a profile per sample type).
  await page.evaluate(() => {
    window.__sandwichCells = () => {
      const tables = [...document.querySelectorAll('table')];
      const header = tables.find(t => t.innerText.includes('Symbol Name'));
      if (!header) return [];
      return tables
        .filter(t => t !== header && t.className === header.className)
        .flatMap(t => [...t.querySelectorAll('tr td')]);
    };
  });

  // The sandwich table only renders the rows that fit on screen, so filter it
  // with the app's own search box (Ctrl+F opens it) before looking for the name.
  // (The search box is the input that Ctrl+F focuses; it has no stable id.)
  await page.keyboard.press('Control+f');
  await page.waitForFunction(
    () => document.activeElement && document.activeElement.localName === 'input',
    null,
    { timeout: Math.min(remaining(), 5000), polling: 50 },
  ).catch(() => fail('Ctrl+F did not open speedscope\'s search box'));
  await page.keyboard.type(name);

  // Wait until the filter is applied: every rendered name cell contains the
  // query (speedscope matches case-insensitive substrings), or no row matches.
  await page
    .waitForFunction(
      n => {
        if (document.body.innerText.includes('No symbol names match')) return true;
        const cells = window.__sandwichCells().filter(td => td === td.parentElement.lastElementChild);
        return cells.length > 0 && cells.every(td => td.textContent.toLowerCase().includes(n.toLowerCase()));
      },
      name,
      { timeout: Math.min(remaining(), 5000), polling: 100 },
    )
    .catch(() => fail(`speedscope's search did not filter the sandwich table for ${JSON.stringify(name)}`));

  // If the name is a substring of many other names, the exact row may be
  // below the rendered part of the (virtualized) table: scroll down to it.
  const found = await page.evaluate(
    async ([n, budgetMs]) => {
      const stopAt = Date.now() + budgetMs;
      const has = () => window.__sandwichCells().some(td => td.textContent.trim() === n);
      if (has()) return true;
      const cell = window.__sandwichCells()[0];
      let sc = cell && cell.closest('table').parentElement;
      while (sc && !(sc.scrollHeight > sc.clientHeight + 1 && /auto|scroll/.test(getComputedStyle(sc).overflowY))) {
        sc = sc.parentElement;
      }
      if (!sc) return false;
      while (Date.now() < stopAt && sc.scrollTop + sc.clientHeight < sc.scrollHeight - 1) {
        sc.scrollTop += Math.max(20, sc.clientHeight - 40);
        await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
        if (has()) return true;
      }
      return has();
    },
    [name, Math.max(0, remaining() - 4000)],
  );
  if (!found) {
    const rows = await page.evaluate(() =>
      [...document.querySelectorAll('table tr')].slice(0, 10).map(r => r.innerText.replace(/\s+/g, ' ')),
    );
    fail(`function name ${JSON.stringify(name)} not shown in speedscope's sandwich table ` +
      `(rows matching the search: ${JSON.stringify(rows)})`);
  }

  // Select the row so the screenshot also shows its callers/callees flame graphs.
  await page
    .locator('table tr td', { hasText: name })
    .filter({ hasText: new RegExp(`^\\s*${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\s*$`) })
    .first()
    .click({ timeout: Math.min(remaining(), 5000) })
    .catch(() => {});
  await page.waitForTimeout(300);
  if (errors.length) fail(`page errors in speedscope: ${errors.join(' | ')}`);
  if (alertText !== null) fail(`speedscope showed an alert: ${JSON.stringify(alertText)}`);
  await page.screenshot({ path: shot, timeout: remaining() });
}

async function checkSvg(page, errors, svgPath, name, shot) {
  await page.goto(pathToFileURL(path.resolve(svgPath)).href, { waitUntil: 'load', timeout: remaining() });
  await page.waitForTimeout(200); // let the flame graph's onload script run
  const info = await page.evaluate(n => {
    const root = document.documentElement;
    const svg = root && root.localName === 'svg' ? root : document.querySelector('svg');
    if (!svg) return { svg: false, root: root ? root.localName : null };
    const texts = [...svg.querySelectorAll('text')];
    const titles = [...svg.querySelectorAll('title')];
    const hit = [...titles, ...texts].find(el => el.textContent.includes(n));
    // The colour the frame is drawn in: its group's rectangle, as rendered.
    const frame = titles.find(el => el.textContent.startsWith(n + ' ('));
    const rect = frame && frame.parentElement.querySelector('rect');
    const box = svg.getBoundingClientRect();
    return {
      svg: true,
      texts: texts.length,
      titles: titles.length,
      width: box.width,
      height: box.height,
      hit: hit ? `<${hit.localName}>${hit.textContent.trim().slice(0, 200)}` : null,
      fill: rect ? getComputedStyle(rect).fill : null,
    };
  }, name);
  if (!info.svg) fail(`${svgPath} has no <svg> element (document root: <${info.root}>)`);
  if (!(info.width > 0 && info.height > 0)) fail(`the <svg> in ${svgPath} renders with zero size`);
  if (info.texts === 0) fail(`the <svg> in ${svgPath} has no <text> elements`);
  if (!info.hit) {
    fail(`function name ${JSON.stringify(name)} not found in the <title>/<text> content of ${svgPath} ` +
      `(${info.texts} <text>, ${info.titles} <title> elements)`);
  }
  if (errors.length) fail(`page errors in ${svgPath}: ${errors.join(' | ')}`);
  // fullPage screenshots hang on SVG documents, so size the viewport to the
  // drawing instead (capped, for very tall flame graphs).
  await page.setViewportSize({
    width: Math.min(4000, Math.max(200, Math.ceil(info.width))),
    height: Math.min(4000, Math.max(100, Math.ceil(info.height))),
  });
  await page.screenshot({ path: shot, timeout: remaining() });
  return info.fill ? ` (fill ${info.fill})` : '';
}

async function checkAnnotate(page, errors, htmlPath, name, shot) {
  await page.goto(pathToFileURL(path.resolve(htmlPath)).href, { waitUntil: 'load', timeout: remaining() });
  const info = await page.evaluate(n => {
    const link = [...document.querySelectorAll('#functions a')].find(a => a.textContent === n);
    if (!link) return { error: `no function ${n} in the page's list` };
    const section = document.querySelector(link.getAttribute('href'));
    if (!section) return { error: `the list's link to ${n} leads nowhere` };
    const rows = [...section.querySelectorAll('tr.code')];
    const flat = r => Number(r.dataset.flat);
    const hottest = rows.reduce((best, r) => (best && flat(best) >= flat(r) ? best : r), null);
    if (!hottest || flat(hottest) === 0) return { error: `${n} has no row with samples` };
    const cold = rows.find(r => flat(r) === 0);
    return {
      hottest: hottest.querySelector('td.wasm').textContent,
      background: getComputedStyle(hottest).backgroundColor,
      cold: cold ? getComputedStyle(cold).backgroundColor : null,
    };
  }, name);
  if (info.error) fail(info.error);
  if (info.background === info.cold) fail(`the hottest row is drawn as a row without samples (${info.background})`);
  if (errors.length) fail(`page errors in ${htmlPath}: ${errors.join(' | ')}`);
  await page.screenshot({ path: shot, timeout: remaining() });
  return ` hottest=${info.hottest} background=${info.background}`;
}

async function main() {
  const [mode, input, name, shot] = process.argv.slice(2);
  if (process.argv.length !== 6 || !['speedscope', 'svg', 'annotate'].includes(mode) || !name) usage();
  if (!fs.existsSync(input)) {
    console.error(`FAIL ${mode}: input file ${input} does not exist`);
    return 1;
  }

  const executablePath = process.env.CHROMIUM_PATH || '/usr/bin/chromium';
  if (!fs.existsSync(executablePath)) {
    console.error(`FAIL ${mode}: no browser at ${executablePath} (run tests/browser/install.sh)`);
    return 1;
  }

  const tmpDir = fs.mkdtempSync(path.join(os.tmpdir(), 'wasmspy-browser-'));
  let browser = null;
  let reported = false;
  // Hard stop: whatever hangs, the process ends (and the browser with it).
  const watchdog = setTimeout(() => {
    if (!reported) console.error(`FAIL ${mode}: gave up after ${TOTAL_MS / 1000} s`);
    const b = browser;
    Promise.race([b ? b.close() : null, new Promise(r => setTimeout(r, 2000))]).finally(() => {
      fs.rmSync(tmpDir, { recursive: true, force: true });
      process.exit(1);
    });
  }, TOTAL_MS);

  try {
    browser = await chromium.launch({
      executablePath,
      headless: true,
      timeout: remaining(),
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
    });
    const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
    page.setDefaultTimeout(remaining());
    const errors = [];
    page.on('pageerror', e => errors.push(String(e && e.message ? e.message : e)));
    // Block anything that is not a local file, to stay offline for sure.
    await page.route(/^(?!file:|data:|blob:)/, r => r.abort());

    let drawn = '';
    if (mode === 'speedscope') await checkSpeedscope(page, errors, input, name, shot, tmpDir);
    else if (mode === 'svg') drawn = await checkSvg(page, errors, input, name, shot);
    else drawn = await checkAnnotate(page, errors, input, name, shot);

    console.log(`ok ${mode}: found ${name}${drawn}`);
    return 0;
  } catch (e) {
    // Playwright errors (timeouts etc.) carry a call log; drop its colour codes.
    const msg = String(e && e.message ? e.message : e).replace(/\x1b\[[0-9;]*m/g, '');
    console.error(`FAIL ${mode}: ${msg}`);
    reported = true;
    // A screenshot of the failure helps debugging; best effort.
    try {
      const pages = browser ? browser.contexts().flatMap(c => c.pages()) : [];
      if (pages[0] && shot && TOTAL_MS - (Date.now() - START) > 6000) {
        await pages[0].screenshot({ path: shot, timeout: 3000 });
      }
    } catch (_) {}
    return 1;
  } finally {
    if (browser) await Promise.race([browser.close().catch(() => {}), new Promise(r => setTimeout(r, 3000))]);
    clearTimeout(watchdog);
    fs.rmSync(tmpDir, { recursive: true, force: true });
  }
}

main().then(code => process.exit(code));
