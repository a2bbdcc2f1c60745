// Runs the web page's script (app.js) in Node against a scripted gateway, without a browser:
// `node web_page_harness.js APP_JS SCENARIO_JSON` prints what the page did as JSON.
//
// SCENARIO_JSON: {"answers": [...], "result_url": ..., "url_expires_unix_ms": ...}; each
// answer is {"status", "headers", "body"} and is what the next fetch() gets, in order.
// Timers fire at once; the waits they were set for are reported, with the connection line's
// state when each was set.
"use strict";

const fs = require("fs");
const vm = require("vm");

const [appPath, scenarioText] = process.argv.slice(2);
const scenario = JSON.parse(scenarioText);
const elements = {};
const requests = [];
const waits = [];

function element(id) {
  if (!elements[id]) {
    elements[id] = {
      id, textContent: "", hidden: true, dataset: {}, value: 0, max: 1, disabled: false,
      href: "", src: "", focus() {}, setAttribute() {}, removeAttribute() {}, append() {},
      replaceChildren() {}, querySelectorAll() { return []; }, addEventListener() {},
    };
  }
  return elements[id];
}

let made = 0;
const document = {
  getElementById: element,
  createElement: () => element(`made-${made++}`),
  addEventListener() {},
};

async function fetch(url, options = {}) {
  requests.push({ url: String(url), headers: options.headers || {} });
  const answer = scenario.answers.shift();
  if (!answer) throw new TypeError("no more scripted answers");
  return new Response(answer.status === 204 ? null : answer.body || "", {
    status: answer.status,
    headers: answer.headers || {},
  });
}

const store = new Map();
const context = vm.createContext({
  document,
  fetch,
  Response,
  TextDecoderStream,
  URL,
  AbortController,
  performance,
  console,
  location: { href: "http://page.example/", origin: "http://page.example" },
  sessionStorage: {
    getItem: (key) => (store.has(key) ? store.get(key) : null),
    setItem: (key, value) => store.set(key, value),
    removeItem: (key) => store.delete(key),
  },
  setTimeout: (callback, ms) => {
    const line = element("job-connection");
    waits.push({ ms, connection: line.dataset.state, text: line.textContent });
    callback();
  },
});
vm.runInContext(fs.readFileSync(appPath, "utf8"), context);

const done = vm.runInContext(
  `current = { id: "j1", abort: new AbortController(), blobUrl: null, progressStart: null };
   follow(current)`,
  context,
);
done.then(async () => {
  // showResult runs after the result event without being awaited: let it finish.
  await new Promise((resolve) => setImmediate(resolve));
  await new Promise((resolve) => setImmediate(resolve));
  const connection = element("job-connection");
  console.log(JSON.stringify({
    requests,
    waits,
    connection: { state: connection.dataset.state, hidden: connection.hidden },
    error: element("job-error").hidden ? null : element("job-error").textContent,
    download: element("download").href,
    state: element("job-state").textContent,
  }));
});
