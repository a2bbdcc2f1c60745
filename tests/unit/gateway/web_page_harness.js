// Runs the web page's script (app.js) in Node against a scripted gateway, without a browser:
// `node web_page_harness.js APP_JS SCENARIO_JSON` prints what the page did as JSON.
//
// SCENARIO_JSON: {"answers": [...], "run": ..., "store": {...}, "report": [...]}; each
// answer is {"status", "headers", "body"} and is what the next fetch() gets, in order, or
// {"network_error": message}, which the fetch throws as a TypeError.
// `run` is JavaScript evaluated in the page's scope once the script has loaded, whose value
// (a promise, say) is awaited and reported as "value"; without it the page follows job
// "j1"'s event stream. `store`
// fills sessionStorage first; `report` names elements whose state the output carries under
// "elements". Timers fire at once; the waits they were set for are reported, with the
// connection line's state when each was set.
//
// The document is a small stand-in for the DOM: elements the page looks up by id exist
// (hidden, as the page's sections start), but for the form's fields ("f-..."), which, as
// every element the page makes, are found by id once given one and until taken out of
// their parent, and attributes, children, listeners and
// `closest` behave as the page uses them.
"use strict";

const fs = require("fs");
const vm = require("vm");

const [appPath, scenarioText] = process.argv.slice(2);
const scenario = JSON.parse(scenarioText);
const elements = {};
const requests = [];
const waits = [];
const revoked = [];

class Element {
  constructor(tag, id = "") {
    this.tagName = tag.toUpperCase();
    this.textContent = "";
    // The page's own elements start as hidden as index.html has them; the ones it makes show.
    this.hidden = Boolean(id);
    this.dataset = {};
    this.value = tag === "static" ? 0 : "";
    this.max = 1;
    this.disabled = false;
    this.href = "";
    this.src = "";
    this.className = "";
    this.attributes = {};
    this.children = [];
    this.options = [];
    this.listeners = {};
    this.parent = null;
    this._id = "";
    if (id) this.id = id;
  }

  get id() {
    return this._id;
  }

  set id(value) {
    this._id = value;
    if (value) elements[value] = this;
  }

  setAttribute(name, value) {
    this.attributes[name] = String(value);
  }

  getAttribute(name) {
    return name in this.attributes ? this.attributes[name] : null;
  }

  removeAttribute(name) {
    delete this.attributes[name];
    if (name === "target" || name === "rel") this[name] = "";
  }

  append(...children) {
    for (const child of children) {
      if (typeof child !== "object") continue;
      child.parent = this;
      this.children.push(child);
    }
  }

  replaceChildren(...children) {
    for (const child of this.children) detach(child);
    this.children = [];
    this.append(...children);
  }

  add(option) {
    if (this.options.length === 0) this.value = option.value;
    this.options.push(option);
  }

  closest(selector) {
    const name = selector.replace(/^\./, "");
    for (let node = this; node; node = node.parent) {
      if (node.className.split(" ").includes(name)) return node;
    }
    return null;
  }

  querySelectorAll(selector) {
    const attribute = /^\[([\w-]+)\]$/.exec(selector)[1];
    const found = [];
    const visit = (node) => {
      for (const child of node.children) {
        if (child.getAttribute(attribute) !== null || (attribute === "name" && child.name)) {
          found.push(child);
        }
        visit(child);
      }
    };
    visit(this);
    return found;
  }

  addEventListener(type, listener) {
    (this.listeners[type] = this.listeners[type] || []).push(listener);
  }

  dispatch(type) {
    for (const listener of this.listeners[type] || []) listener({ type, preventDefault() {} });
  }

  focus() {}
}

function detach(node) {
  if (elements[node.id] === node) delete elements[node.id];
  node.parent = null;
  for (const child of node.children) detach(child);
}

function element(id) {
  if (!elements[id]) new Element("static", id);
  return elements[id];
}

const document = {
  // The page's own elements always exist; a field's ("f-...") only while the page shows it.
  getElementById: (id) => (id.startsWith("f-") ? elements[id] || null : element(id)),
  createElement: (tag) => new Element(tag),
  addEventListener() {},
};

// Where the page is served: the page's relative paths resolve against it, as in a browser.
const pageHref = scenario.page_url || "http://page.example/";

async function fetch(url, options = {}) {
  // Recorded as the path the browser would ask for (the page's paths are relative).
  const asked = new URL(String(url), pageHref);
  const path = asked.origin === new URL(pageHref).origin ? asked.pathname + asked.search : asked.href;
  // As browsers do: a header value must be ISO-8859-1, else fetch() throws a TypeError.
  for (const value of Object.values(options.headers || {})) {
    if (/[^\x00-\xff]/.test(value)) {
      throw new TypeError("Failed to execute 'fetch': String contains non ISO-8859-1 code point.");
    }
  }
  requests.push({ url: path, method: options.method || "GET", headers: options.headers || {} });
  const answer = (scenario.answers || []).shift();
  if (!answer) throw new TypeError("no more scripted answers");
  // {"network_error": "..."}: the connection failed, as fetch() reports it.
  if (answer.network_error) throw new TypeError(answer.network_error);
  return new Response(answer.status === 204 ? null : answer.body || "", {
    status: answer.status,
    headers: answer.headers || {},
  });
}

class PageURL extends URL {
  static createObjectURL(blob) {
    return URL.createObjectURL(blob);
  }

  static revokeObjectURL(url) {
    revoked.push(url);
    URL.revokeObjectURL(url);
  }
}

const store = new Map(Object.entries(scenario.store || {}));
const context = vm.createContext({
  document,
  fetch,
  Response,
  TextDecoderStream,
  URL: PageURL,
  AbortController,
  performance,
  console,
  Option: function Option(text, value) {
    return { text, value };
  },
  location: { href: pageHref, origin: new URL(pageHref).origin },
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

const follow = `current = { id: "j1", abort: new AbortController(), blobUrl: null, progressStart: null };
   follow(current)`;
const done = Promise.resolve(vm.runInContext(scenario.run || follow, context));

function described(id) {
  const node = elements[id];
  if (!node) return null;
  return {
    text: node.textContent,
    hidden: node.hidden,
    disabled: node.disabled,
    value: node.value,
    dataset: node.dataset,
    attributes: node.attributes,
    children: node.children.length,
    href: node.href,
    download: node.download || "",
    target: node.target || "",
    rel: node.rel || "",
  };
}

done.then(async (value) => {
  // showResult runs after the result event without being awaited: let it finish.
  for (let i = 0; i < 4; i += 1) await new Promise((resolve) => setImmediate(resolve));
  const connection = element("job-connection");
  console.log(JSON.stringify({
    requests,
    waits,
    revoked,
    store: Object.fromEntries(store),
    connection: { state: connection.dataset.state, hidden: connection.hidden },
    error: element("job-error").hidden ? null : element("job-error").textContent,
    download: element("download").href,
    state: element("job-state").textContent,
    elements: Object.fromEntries((scenario.report || []).map((id) => [id, described(id)])),
    value: value === undefined ? null : value,
  }));
});
