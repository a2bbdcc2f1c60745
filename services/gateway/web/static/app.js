// The mediamesh web page: submit a job to this gateway's /v1 API and follow it.
// Plain browser JavaScript, no build step. Events are read with fetch() and a stream reader
// rather than EventSource, because EventSource cannot send the Authorization header that a
// mesh with API keys needs. Every API path is relative to the page (v1/..., not /v1/...), so
// the page works at / and under a proxy's path prefix alike.
"use strict";

const KEY_STORE = "mediamesh.apiKey";
const JOBS_STORE = "mediamesh.jobs";
const MODEL_STORE = "mediamesh.model";
const FINAL_STATES = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "EXPIRED"]);
// Reconnects to a dropped event stream before the page gives up on it.
const MAX_RECONNECTS = 5;
// The wait before a reconnect starts at the stream's `retry:` and doubles after each failed
// one, up to this, as the SDK backs off; a Retry-After from the gateway is waited in full.
const MAX_RECONNECT_WAIT_MS = 30000;
// Answers that say "not now" rather than "never": the mesh is starting, overloaded or
// without its scheduler for a moment (503, 429), or a proxy in front lost it (502, 504).
const PASSING_STATUSES = new Set([429, 502, 503, 504]);
const EXTENSIONS = {
  "image/png": "png", "image/jpeg": "jpg", "image/webp": "webp", "image/gif": "gif",
  "video/mp4": "mp4", "video/webm": "webm", "audio/wav": "wav", "audio/x-wav": "wav",
  "audio/flac": "flac", "audio/ogg": "ogg", "audio/mpeg": "mp3", "audio/opus": "opus",
  "audio/aac": "aac",
};

// Image formats whose quality a request may set (output_quality); png is lossless.
const LOSSY_FORMATS = ["jpeg", "webp"];

const $ = (id) => document.getElementById(id);
let models = [];
// The job on screen: {id, abort: AbortController, blobUrl}.
let current = null;
// Goes up whenever the key changes or is forgotten. An answer still on its way belongs to the
// key it was asked under, another tenant's or one forgotten: it is dropped when it arrives.
let keyGeneration = 0;

// ---------- the API ----------

// JSON with uint64 seeds kept exact: JavaScript numbers round integers past 2^53, so long
// seeds are read as text before parsing.
function parseJson(text) {
  return JSON.parse(text.replace(/"seed":(\d{16,})/g, '"seed":"$1"'));
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  toString() {
    return this.code ? `${this.code}: ${this.message}` : this.message;
  }
}

function authHeaders(extra = {}) {
  const key = sessionStorage.getItem(KEY_STORE);
  return key ? { ...extra, Authorization: `Bearer ${key}` } : extra;
}

async function errorOf(response) {
  let body = null;
  try {
    body = parseJson(await response.text());
  } catch (_) {
    // Not JSON: a proxy's page, say; the status says enough.
  }
  // The mesh's shape, or OpenAI's ({error: {code, message}}) on the routes it shares,
  // such as /v1/models.
  const shaped = body && typeof body.error === "object" && body.error !== null ? body.error : body;
  const code = (shaped && shaped.code) || `HTTP ${response.status}`;
  let message = (shaped && shaped.message) || response.statusText || "request failed";
  const wait = response.headers.get("Retry-After");
  if (wait) message += ` (retry after ${wait} s)`;
  return new ApiError(response.status, code, message);
}

async function api(path, options = {}) {
  // Built before the request: an error here is the page's, never the network's.
  const headers = authHeaders(options.headers || {});
  let response;
  try {
    response = await fetch(path, { ...options, headers });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, "UNAVAILABLE", `the gateway cannot be reached (${error.message})`);
  }
  if (!response.ok) throw await errorOf(response);
  return parseJson(await response.text());
}

// ---------- the API key ----------

// API keys are visible ASCII in practice. A header value must be ISO-8859-1: fetch() throws a
// TypeError on anything else, which the page would report as the gateway being unreachable,
// so a key is checked where it is entered, and one that fails is never sent.
const KEY_CHARACTER = /^[\x21-\x7e]$/;

function keyProblem(key) {
  const odd = [...key].find((character) => !KEY_CHARACTER.test(character));
  if (odd === undefined) return "";
  const shown = odd.trim() ? `"${odd}"` : `U+${odd.codePointAt(0).toString(16).toUpperCase().padStart(4, "0")}`;
  return `Not used: an API key has only visible ASCII characters (letters, digits, punctuation; no spaces), and ${shown} is not one.`;
}

function setupKey() {
  const input = $("api-key");
  const stored = sessionStorage.getItem(KEY_STORE) || "";
  // Kept by an older page, say: a key that cannot be sent is dropped, and said so.
  if (keyProblem(stored)) {
    sessionStorage.removeItem(KEY_STORE);
    $("key-status").textContent = keyProblem(stored);
  } else {
    input.value = stored;
  }
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const key = input.value.trim();
    const problem = keyProblem(key);
    input.setAttribute("aria-invalid", problem ? "true" : "false");
    if (problem) {
      // The key in use, if any, stays in use: nothing of the page changes.
      $("key-status").textContent = problem;
      input.focus();
      return;
    }
    // Another key may be another tenant's: nothing of the last one's stays on screen.
    if (key !== (sessionStorage.getItem(KEY_STORE) || "")) clearTenantView();
    if (key) sessionStorage.setItem(KEY_STORE, key);
    else sessionStorage.removeItem(KEY_STORE);
    $("key-status").textContent = key ? "Key in use for this session." : "No key.";
    loadModels();
    loadJobs();
  });
  $("forget-key").addEventListener("click", () => {
    input.value = "";
    input.setAttribute("aria-invalid", "false");
    sessionStorage.removeItem(KEY_STORE);
    clearTenantView();
    $("key-status").textContent = "Key forgotten.";
  });
}

// Takes every trace of the key's tenant off the page: the job on screen (its stream
// stopped, its result's bytes let go), the models and the listed jobs, and those answers for
// it still to come.
function clearTenantView() {
  keyGeneration += 1;
  closeJob();
  models = [];
  $("model").replaceChildren();
  renderFields();
  clearFormError();
  sessionStorage.removeItem(JOBS_STORE);
  renderJobs();
}

function showAuthProblem(error) {
  if (error.status === 401 || error.status === 403) {
    let text = "This key may not do that.";
    if (error.status === 401) {
      text = sessionStorage.getItem(KEY_STORE) ? "The key was refused." : "This mesh needs an API key.";
    }
    $("key-status").textContent = text;
    $("api-key").focus();
  }
}

// Whether `error` says the caller's key does not open this mesh (none, or a wrong one).
const refusedKey = (error) => error.status === 401;

// ---------- models and their fields ----------

const accepts = (name) => (m) => (m.accepted_fields || []).includes(name);
const takes = (input) => (m) => (m.inputs || []).includes(input);
const limit = (m, name) => (m.limits || {})[name] || 0;

// The request fields the form can set; `when` says whether a model uses one, and the limits
// fill its bounds and hint. Empty fields are left out: the model's defaults apply.
const FIELDS = [
  { name: "prompt", label: "Prompt", type: "textarea", when: accepts("prompt"), wide: true },
  { name: "negative_prompt", label: "Negative prompt", type: "textarea", when: accepts("negative_prompt"), wide: true },
  { name: "image", label: "Input image", type: "file", when: takes("image"), hint: pixelsHint },
  { name: "mask_image", label: "Mask image", type: "file", when: takes("mask_image"), hint: pixelsHint },
  { name: "strength", label: "Strength", type: "float", when: (m) => accepts("strength")(m) && takes("image")(m),
    min: () => 0, max: () => 1, step: () => 0.05, default: (m) => m.default_strength },
  { name: "steps", label: "Steps", type: "int", when: accepts("steps"),
    min: () => 1, max: (m) => limit(m, "max_steps"), default: (m) => limit(m, "default_steps") },
  { name: "width", label: "Width", type: "int", when: accepts("width"),
    min: (m) => limit(m, "size_multiple") || 1, max: (m) => limit(m, "max_width"),
    step: (m) => limit(m, "size_multiple") || 1, default: (m) => limit(m, "default_width") },
  { name: "height", label: "Height", type: "int", when: accepts("height"),
    min: (m) => limit(m, "size_multiple") || 1, max: (m) => limit(m, "max_height"),
    step: (m) => limit(m, "size_multiple") || 1, default: (m) => limit(m, "default_height") },
  // A video model takes 4k + 1 frames, say (its frame_multiple): min 1 and that step allow
  // exactly those.
  { name: "num_frames", label: "Frames", type: "int", when: accepts("num_frames"),
    min: () => 1, max: (m) => limit(m, "max_num_frames"), step: (m) => limit(m, "frame_multiple") || 1,
    stepWords: (n) => `1 more than a multiple of ${n}`, default: (m) => limit(m, "default_num_frames") },
  { name: "duration_s", label: "Duration (s)", type: "float", when: accepts("duration_s"),
    min: () => 0.1, max: (m) => limit(m, "max_duration_s"), step: () => 0.1,
    default: (m) => limit(m, "default_duration_s") },
  { name: "guidance_scale", label: "Guidance scale", type: "float", when: accepts("guidance_scale"),
    min: () => 0, max: (m) => limit(m, "max_guidance_scale"), step: () => 0.1,
    default: (m) => limit(m, "default_guidance_scale") },
  { name: "seed", label: "Seed", type: "int", when: accepts("seed"), min: () => 0, hint: "random when empty" },
  { name: "output_format", label: "Output format", type: "select", when: (m) => (m.output_formats || []).length > 1,
    options: (m) => m.output_formats },
  { name: "output_quality", label: "Quality", type: "int",
    when: (m) => (m.output_formats || []).some((f) => LOSSY_FORMATS.includes(f)),
    // The gateway refuses a quality for a format that has none (png): offered only for
    // jpeg and webp, and again whenever the format changes.
    applies: (m) => LOSSY_FORMATS.includes(chosenFormat(m)),
    min: () => 1, max: () => 100, hint: "jpeg and webp only" },
  { name: "fps", label: "Frames per second", type: "int", when: (m) => m.modality === "video", min: () => 1 },
  { name: "preview_every_steps", label: "Preview every N steps", type: "int", when: (m) => m.previews,
    min: () => 0, value: () => 1, hint: "0: no previews" },
  { name: "adapters", label: "Adapter (LoRA)", type: "select", when: (m) => (m.adapters || []).length > 0,
    options: (m) => ["", ...m.adapters.map((a) => a.name)], hint: "at its default scale" },
  { name: "priority", label: "Priority", type: "select", when: () => true,
    options: () => ["STANDARD", "REALTIME", "BATCH"] },
];

function selectedModel() {
  return models.find((m) => m.name === $("model").value);
}

// The format a job of `model` is written in: the one picked, else the model's default
// (the type it lists, `mime_type`).
function chosenFormat(model) {
  const picked = $("f-output_format");
  if (picked && picked.value) return picked.value;
  const formats = model.output_formats || [];
  const byType = (model.mime_type || "").split("/")[1];
  return formats.includes(byType) ? byType : formats[0];
}

// Shows, and sends, only the fields that apply to the other values chosen.
function syncFields(model) {
  for (const field of FIELDS) {
    const input = $(`f-${field.name}`);
    if (!field.applies || !input) continue;
    const applies = field.applies(model);
    input.disabled = !applies;
    input.closest(".field").hidden = !applies;
  }
}

function fieldElement(field, model) {
  const wrap = document.createElement("div");
  wrap.className = field.wide ? "field wide" : "field";
  const id = `f-${field.name}`;
  const label = document.createElement("label");
  label.htmlFor = id;
  label.textContent = field.label;
  let input;
  if (field.type === "textarea") {
    input = document.createElement("textarea");
    input.rows = 2;
  } else if (field.type === "select") {
    input = document.createElement("select");
    for (const option of field.options(model)) input.add(new Option(option || "none", option));
  } else {
    input = document.createElement("input");
    if (field.type === "file") {
      input.type = "file";
      input.accept = "image/*";
    } else {
      input.type = "number";
      input.step = field.step ? String(field.step(model)) : "1";
      if (field.min) input.min = String(field.min(model));
      const max = field.max ? field.max(model) : 0;
      if (max) input.max = String(max);
      const fallback = field.default ? field.default(model) : 0;
      if (fallback) input.placeholder = String(fallback);
      if (field.value) input.value = String(field.value(model));
    }
  }
  input.id = id;
  input.name = field.name;
  wrap.append(label, input);
  const hint = hintOf(field, model);
  if (hint) {
    const text = document.createElement("small");
    text.id = `${id}-hint`;
    text.className = "hint";
    text.textContent = hint;
    input.setAttribute("aria-describedby", text.id);
    input.dataset.hint = text.id;
    wrap.append(text);
  }
  return wrap;
}

function hintOf(field, model) {
  const parts = [];
  const fallback = field.default ? field.default(model) : 0;
  if (fallback) parts.push(`default ${fallback}`);
  const max = field.max ? field.max(model) : 0;
  if (max) parts.push(`up to ${max}`);
  const step = field.step && field.type === "int" ? field.step(model) : 1;
  if (step > 1) parts.push(field.stepWords ? field.stepWords(step) : `multiple of ${step}`);
  const hint = typeof field.hint === "function" ? field.hint(model) : field.hint;
  if (hint) parts.push(hint);
  return parts.join(", ");
}

// An input image's size limit (limits.max_input_pixels): as a square's sides where it is one.
function pixelsHint(model) {
  const pixels = limit(model, "max_input_pixels");
  if (!pixels) return "";
  const side = Math.round(Math.sqrt(pixels));
  return side * side === pixels ? `up to ${side} × ${side} pixels` : `up to ${pixels} pixels`;
}

function renderFields() {
  const model = selectedModel();
  const box = $("fields");
  box.replaceChildren();
  if (!model) {
    $("model-info").textContent = "";
    return;
  }
  sessionStorage.setItem(MODEL_STORE, model.name);
  for (const field of FIELDS) {
    if (field.when(model)) box.append(fieldElement(field, model));
  }
  const format = $("f-output_format");
  if (format) format.addEventListener("change", () => syncFields(model));
  syncFields(model);
  const facts = [model.modality, model.pipeline, model.ready ? "ready" : "no worker serves it now"];
  if (model.previews) facts.push("previews");
  $("model-info").textContent = facts.filter(Boolean).join(" · ");
}

async function loadModels() {
  const generation = keyGeneration;
  const select = $("model");
  try {
    const listed = await api("v1/models");
    if (generation !== keyGeneration) return;
    models = listed.data || [];
    clearFormError();
  } catch (error) {
    if (generation !== keyGeneration) return;
    if (refusedKey(error)) {
      models = [];
      select.replaceChildren();
      renderFields();
    }
    showFormError(error);
    showAuthProblem(error);
    return;
  }
  const wanted = select.value || sessionStorage.getItem(MODEL_STORE);
  select.replaceChildren();
  for (const model of models) {
    const text = model.ready ? model.name : `${model.name} (not ready)`;
    select.add(new Option(text, model.name));
  }
  if (models.some((m) => m.name === wanted)) select.value = wanted;
  renderFields();
}

// ---------- submitting ----------

function showFormError(error) {
  const box = $("form-error");
  box.textContent = String(error);
  box.hidden = false;
  // Messages name the field first ("steps: ..."): point at it.
  const field = error.message && error.message.split(":")[0];
  const input = field && $(`f-${field}`);
  if (input) {
    input.setAttribute("aria-invalid", "true");
    // Read out with the field: its hint, then what is wrong with it.
    input.setAttribute("aria-describedby", [input.dataset.hint, "form-error"].filter(Boolean).join(" "));
    input.focus();
  }
}

function clearFormError() {
  $("form-error").hidden = true;
  $("form-error").textContent = "";
  for (const input of $("fields").querySelectorAll("[aria-invalid]")) {
    input.removeAttribute("aria-invalid");
    if (input.dataset.hint) input.setAttribute("aria-describedby", input.dataset.hint);
    else input.removeAttribute("aria-describedby");
  }
}

function requestBody(model) {
  const values = { model: model.name };
  const files = {};
  for (const input of $("fields").querySelectorAll("[name]")) {
    if (input.disabled) continue; // a field that does not apply to the values chosen
    if (input.type === "file") {
      if (input.files.length) files[input.name] = input.files[0];
      continue;
    }
    // A number box the browser cannot read ("1e", "--") reports an empty value; sent as
    // empty, the field would be dropped and the model's default used without a word.
    if (input.validity && input.validity.badInput) {
      throw new ApiError(0, "INVALID_ARGUMENT", `${input.name}: not a number; type one`);
    }
    const text = input.value.trim();
    if (text === "") continue;
    const field = FIELDS.find((f) => f.name === input.name);
    if (input.name === "adapters") {
      values.adapters = [{ name: text }];
    } else if (field.type === "int" || field.type === "float") {
      // uint64 seeds travel as text, which the proto JSON mapping accepts, so none is rounded.
      values[input.name] = input.name === "seed" ? text : Number(text);
    } else {
      values[input.name] = text;
    }
  }
  if (Object.keys(files).length === 0) {
    return { body: JSON.stringify(values), headers: { "Content-Type": "application/json" } };
  }
  const form = new FormData();
  for (const [name, value] of Object.entries(values)) {
    // Form values that are not text are read as JSON by the gateway.
    form.append(name, typeof value === "object" ? JSON.stringify(value) : String(value));
  }
  for (const [name, file] of Object.entries(files)) form.append(name, file, file.name);
  return { body: form, headers: {} };
}

async function submit(event) {
  event.preventDefault();
  clearFormError();
  const model = selectedModel();
  if (!model) {
    showFormError(new ApiError(0, "", "model: pick a model"));
    return;
  }
  const button = $("submit");
  button.disabled = true;
  const generation = keyGeneration;
  try {
    const { body, headers } = requestBody(model);
    const job = await api("v1/jobs", { method: "POST", body, headers });
    // Made under a key since forgotten or changed: not this page's job any more.
    if (generation !== keyGeneration) return;
    const prompt = ($("f-prompt") || {}).value || "";
    remember({ job_id: job.job_id, model: job.model, prompt: prompt.slice(0, 80), state: job.state });
    showJob(job.job_id, job);
    $("job-title").focus();
  } catch (error) {
    if (generation !== keyGeneration) return;
    showFormError(error);
    showAuthProblem(error);
  } finally {
    button.disabled = false;
  }
}

// ---------- the caller's jobs ----------

function storedJobs() {
  try {
    return JSON.parse(sessionStorage.getItem(JOBS_STORE) || "[]");
  } catch (_) {
    return [];
  }
}

function remember(entry) {
  const jobs = storedJobs().filter((j) => j.job_id !== entry.job_id);
  jobs.unshift(entry);
  sessionStorage.setItem(JOBS_STORE, JSON.stringify(jobs));
  renderJobs();
}

function forgetStored(jobId) {
  sessionStorage.setItem(JOBS_STORE, JSON.stringify(storedJobs().filter((j) => j.job_id !== jobId)));
  renderJobs();
}

function updateStored(jobId, state) {
  const jobs = storedJobs();
  const entry = jobs.find((j) => j.job_id === jobId);
  if (!entry || entry.state === state) return;
  entry.state = state;
  sessionStorage.setItem(JOBS_STORE, JSON.stringify(jobs));
  renderJobs();
}

function renderJobs() {
  const list = $("jobs");
  const jobs = storedJobs();
  $("jobs-empty").hidden = jobs.length > 0;
  list.replaceChildren();
  for (const job of jobs) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link";
    button.dataset.jobId = job.job_id;
    button.textContent = `${job.model}: ${job.prompt || job.job_id}`;
    if (current && current.id === job.job_id) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => showJob(job.job_id));
    const state = document.createElement("span");
    state.className = "state";
    state.dataset.state = job.state;
    state.textContent = job.state;
    item.append(button, " ", state);
    list.append(item);
  }
}

// The caller's most recent jobs as the gateway lists them: those of every client under this
// key (the SDK, the command line, another tab), and their states now.
const LISTED_JOBS = 20;

async function loadJobs() {
  const generation = keyGeneration;
  let page;
  try {
    page = await api(`v1/jobs?limit=${LISTED_JOBS}`);
  } catch (error) {
    if (generation !== keyGeneration) return;
    // A key refused lists nobody's jobs; with the gateway out of reach the list stays as
    // this session knew it.
    if (refusedKey(error)) {
      sessionStorage.removeItem(JOBS_STORE);
      renderJobs();
    }
    return;
  }
  if (generation !== keyGeneration) return;
  const jobs = page.data.map((job) => ({
    job_id: job.job_id,
    model: job.model,
    prompt: (job.prompt || "").slice(0, 80),
    state: job.state,
  }));
  sessionStorage.setItem(JOBS_STORE, JSON.stringify(jobs));
  renderJobs();
}

// ---------- one job on screen ----------

function setState(state) {
  const text = $("job-state");
  // Screen readers hear the state when it changes, not each event that repeats it.
  if (state !== text.dataset.state) $("job-announce").textContent = `Job ${state.toLowerCase()}.`;
  text.textContent = state;
  text.dataset.state = state;
  $("cancel").disabled = FINAL_STATES.has(state);
  $("delete").disabled = !FINAL_STATES.has(state);
  // A job that stopped short has no time left to count down.
  if (FINAL_STATES.has(state) && state !== "SUCCEEDED") showStopped();
  if (current) updateStored(current.id, state);
}

function showStopped() {
  const bar = $("progress");
  $("progress-text").textContent = bar.max > 1 ? `Stopped at step ${bar.value} of ${bar.max}.` : "";
}

function note(text) {
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  $("notices").append(item);
}

function showJobError(code, message) {
  const box = $("job-error");
  box.textContent = code === "CANCELLED" ? "Cancelled." : `${code}: ${message}`;
  box.hidden = false;
}

// Stops following the job on screen and lets its result's bytes go; hides the job.
function closeJob() {
  if (current) {
    current.abort.abort();
    if (current.blobUrl) URL.revokeObjectURL(current.blobUrl);
  }
  current = null;
  $("job").hidden = true;
  $("result-media").replaceChildren();
  $("download").href = "#";
}

function resetJobView(jobId) {
  closeJob();
  current = { id: jobId, abort: new AbortController(), blobUrl: null, progressStart: null };
  $("job").hidden = false;
  $("job-id").textContent = jobId;
  // Nothing of the last job stays: its state until this one's is known, above all.
  $("job-state").textContent = "";
  $("job-state").dataset.state = "";
  $("job-announce").textContent = "";
  $("cancel").disabled = true;
  $("delete").disabled = true;
  $("job-error").hidden = true;
  showConnection("");
  $("progress").value = 0;
  $("progress").max = 1;
  $("progress-text").textContent = "";
  $("notices").replaceChildren();
  $("preview-figure").hidden = true;
  $("preview-figure").dataset.count = "0";
  $("preview").removeAttribute("src");
  $("result").hidden = true;
  $("result-media").replaceChildren();
  renderJobs();
}

async function showJob(jobId, known = null) {
  resetJobView(jobId);
  const mine = current;
  let job = known;
  try {
    if (!job) job = await api(`v1/jobs/${encodeURIComponent(jobId)}`);
  } catch (error) {
    if (mine === current) showJobError(error.code, error.message);
    return;
  }
  if (mine !== current) return;
  showProgress(job.step, job.total_steps);
  setState(job.state);
  if (job.state === "SUCCEEDED" && job.result) {
    showResult(job.result, mine);
  } else if (FINAL_STATES.has(job.state)) {
    if (job.error) showJobError(job.error.code, job.error.message);
  } else {
    follow(mine);
  }
}

function showProgress(step, total, etaS = null) {
  if (!total) return;
  const bar = $("progress");
  bar.max = total;
  bar.value = step;
  let text = `Step ${step} of ${total}`;
  if (etaS !== null && Number.isFinite(etaS)) text += ` · about ${Math.max(0, Math.round(etaS))} s left`;
  $("progress-text").textContent = text;
}

// Seconds left at the rate measured since the first progress event this page saw.
function estimate(job, step, total) {
  const now = performance.now();
  if (!job.progressStart || step < job.progressStart.step) {
    job.progressStart = { step, at: now };
    return null;
  }
  const done = step - job.progressStart.step;
  if (done <= 0) return null;
  return ((now - job.progressStart.at) / 1000 / done) * (total - step);
}

function onEvent(job, name, data) {
  if (data.state) setState(data.state);
  if (name === "queued") {
    // eta_s is null while no worker serves the model: a worker's start cannot be estimated.
    // The gateway sends the position again as jobs ahead leave; 0 is next in line.
    const eta = typeof data.eta_s === "number" && data.eta_s > 0
      ? `, about ${Math.round(data.eta_s)} s until it finishes` : ", waiting for a worker";
    const ahead = data.position ? `${data.position} ${data.position === 1 ? "job" : "jobs"} ahead` : "next in line";
    $("progress-text").textContent = `Queued, ${ahead}${eta}`;
  } else if (name === "progress") {
    showProgress(data.step, data.total_steps, estimate(job, data.step, data.total_steps));
    if (data.preview) {
      const figure = $("preview-figure");
      $("preview").src = `data:${data.preview.mime_type};base64,${data.preview.data}`;
      figure.dataset.count = String(Number(figure.dataset.count) + 1);
      figure.hidden = false;
    }
  } else if (name === "notice") {
    note(data.message || data.notice);
  } else if (name === "result") {
    $("progress").value = $("progress").max;
    $("progress-text").textContent = "Done.";
    showResult(data, job);
  } else if (name === "error") {
    showJobError(data.code, data.message);
  }
}

// One frame of text/event-stream: its fields, per the EventSource processing rules.
function parseFrame(frame) {
  const event = { id: null, name: "message", data: [], retry: null };
  for (const line of frame.split("\n")) {
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "id") event.id = value;
    else if (field === "event") event.name = value;
    else if (field === "data") event.data.push(value);
    else if (field === "retry" && /^\d+$/.test(value)) event.retry = Number(value);
  }
  return event;
}

// Seconds a Retry-After header asks for (a number or an HTTP date); 0 for none.
function retryAfterS(response) {
  const value = (response.headers.get("Retry-After") || "").trim();
  if (/^\d+$/.test(value)) return Number(value);
  const when = Date.parse(value);
  return Number.isNaN(when) ? 0 : Math.max(0, (when - Date.now()) / 1000);
}

// Milliseconds to wait before reconnect number `failures` (1, 2, ...).
function reconnectDelayMs(retryMs, failures, waitS) {
  const backoff = Math.min(retryMs * 2 ** (failures - 1), MAX_RECONNECT_WAIT_MS);
  return Math.max(backoff, waitS * 1000);
}

// The connection line under the job's state: hidden while the stream is up.
function showConnection(text) {
  const line = $("job-connection");
  line.textContent = text;
  line.dataset.state = text ? "reconnecting" : "connected";
  line.hidden = !text;
}

async function follow(job) {
  const url = `v1/jobs/${encodeURIComponent(job.id)}/events`;
  let lastId = null;
  let retryMs = 1000;
  let failures = 0;
  let lastProblem = "the event stream dropped";
  while (job === current) {
    let ended = false;
    let waitS = 0;
    try {
      const headers = authHeaders({ Accept: "text/event-stream" });
      if (lastId) headers["Last-Event-ID"] = lastId;
      const response = await fetch(url, { headers, signal: job.abort.signal, cache: "no-store" });
      // 204: the last event was already seen; nothing follows it.
      if (response.status === 204) return;
      if (!response.ok) {
        const error = await errorOf(response);
        if (!PASSING_STATUSES.has(response.status)) {
          showConnection("");
          showJobError(error.code, error.message);
          showAuthProblem(error);
          return;
        }
        waitS = retryAfterS(response);
        throw error;
      }
      if (job === current) showConnection("");
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      reading: for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer = (buffer + value).replace(/\r\n?/g, "\n");
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = parseFrame(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (frame.retry !== null) retryMs = frame.retry;
          if (frame.id !== null) lastId = frame.id;
          if (frame.data.length === 0) continue;
          failures = 0;
          if (frame.name === "stream-error") {
            // The gateway lost the scheduler: reconnect and resume after the last id.
            const data = parseJson(frame.data.join("\n"));
            lastProblem = `${data.code}: ${data.message}`;
            await reader.cancel();
            break reading;
          }
          onEvent(job, frame.name, parseJson(frame.data.join("\n")));
          if (frame.name === "result" || frame.name === "error") ended = true;
        }
      }
    } catch (error) {
      if (error.name === "AbortError") return;
      lastProblem = String(error);
    }
    if (ended || job !== current) return;
    failures += 1;
    if (failures > MAX_RECONNECTS) {
      showConnection("");
      showJobError("UNAVAILABLE",
        `lost the job's event stream (${lastProblem}); pick the job in the list to look again`);
      return;
    }
    const delayMs = reconnectDelayMs(retryMs, failures, waitS);
    const seconds = Math.ceil(delayMs / 1000);
    showConnection(`Reconnecting in ${seconds} s (try ${failures} of ${MAX_RECONNECTS}): ${lastProblem}`);
    note(`event stream lost (${lastProblem}); reconnecting in ${seconds} s`);
    await new Promise((resolve) => setTimeout(resolve, delayMs));
  }
}

// Whether `result` is served by this gateway's own result endpoint rather than by object
// storage's presigned URL (which carries its expiry). Its absolute URL names the host the
// gateway was asked under, or its public_url, which this page may know by another name
// (behind a proxy): only the path says it is ours.
function isOwnResult(result, ownPath) {
  if (result.url_expires_unix_ms) return false;
  const url = new URL(result.url, location.href);
  return url.search === "" && url.pathname.endsWith(`/${ownPath}`);
}

// The file name the gateway gives a result (Content-Disposition), else the same one it
// would: the job id and the type's extension.
function resultFileName(response, jobId, mimeType) {
  const header = (response && response.headers.get("Content-Disposition")) || "";
  const named = /filename="([^"/\\]+)"/.exec(header);
  return named ? named[1] : `${jobId}.${EXTENSIONS[mimeType] || "bin"}`;
}

// The result is fetched again after a dropped connection or a passing refusal, as the event
// stream is: a gateway restarting between its result event and this fetch would otherwise
// leave a finished job without its result on the page.
async function fetchResult(path, job) {
  for (let failures = 1; ; failures++) {
    let waitS = 0;
    let problem;
    try {
      const response = await fetch(path, { headers: authHeaders(), signal: job.abort.signal });
      if (response.ok || !PASSING_STATUSES.has(response.status)) {
        showConnection("");
        return response;
      }
      waitS = retryAfterS(response);
      problem = String(await errorOf(response));
    } catch (error) {
      if (error.name === "AbortError") throw error;
      problem = `the gateway cannot be reached (${error.message})`;
    }
    if (failures > MAX_RECONNECTS || job !== current) {
      showConnection("");
      throw new ApiError(0, "UNAVAILABLE",
        `could not fetch the result (${problem}); pick the job in the list to look again`);
    }
    const delayMs = reconnectDelayMs(1000, failures, waitS);
    const seconds = Math.ceil(delayMs / 1000);
    showConnection(`Fetching the result again in ${seconds} s (try ${failures} of ${MAX_RECONNECTS}): ${problem}`);
    await new Promise((resolve) => setTimeout(resolve, delayMs));
  }
}

async function showResult(result, job) {
  const ownPath = `v1/jobs/${encodeURIComponent(job.id)}/result`;
  let source = new URL(result.url, location.href).href;
  let fileName = resultFileName(null, job.id, result.mime_type);
  if (isOwnResult(result, ownPath)) {
    // Our own result endpoint wants the API key, which <img src> cannot send: fetch the
    // bytes, from the gateway that served this page, by its path.
    try {
      const response = await fetchResult(ownPath, job);
      if (!response.ok) throw await errorOf(response);
      fileName = resultFileName(response, job.id, result.mime_type);
      source = URL.createObjectURL(await response.blob());
      if (job !== current) {
        URL.revokeObjectURL(source);
        return;
      }
      job.blobUrl = source;
    } catch (error) {
      if (error.name !== "AbortError") showJobError(error.code || "UNAVAILABLE", error.message);
      return;
    }
  }
  if (job !== current) return;
  const kind = result.mime_type.split("/")[0];
  let media;
  if (kind === "video" || kind === "audio") {
    media = document.createElement(kind);
    media.controls = true;
    media.setAttribute("aria-label", `Result of job ${job.id}`);
  } else {
    media = document.createElement("img");
    media.alt = `Result of job ${job.id}`;
  }
  media.id = "result-element";
  media.src = source;
  $("result-media").replaceChildren(media);
  const link = $("download");
  link.href = source;
  link.download = fileName;
  if (source.startsWith("blob:")) {
    link.removeAttribute("target");
    link.removeAttribute("rel");
  } else {
    // Object storage's URL: browsers ignore `download` across origins and would leave this
    // page (and the job it follows) for the file; open it beside the page instead.
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  const kib = result.size_bytes ? `, ${Math.ceil(result.size_bytes / 1024)} KiB` : "";
  $("result-info").textContent = `${result.mime_type}${kib}, seed ${result.seed}`;
  $("result").hidden = false;
}

async function cancel() {
  if (!current) return;
  const job = current;
  $("cancel").disabled = true;
  try {
    const info = await api(`v1/jobs/${encodeURIComponent(job.id)}`, { method: "DELETE" });
    if (job === current) setState(info.state);
  } catch (error) {
    if (job === current) {
      showJobError(error.code, error.message);
      $("cancel").disabled = false;
    }
  }
}

// Deletes the ended job on screen with its result (the mesh forgets it), after the person
// confirms: nothing brings it back.
async function deleteJob() {
  if (!current) return;
  const job = current;
  const question = "Delete this job and its result? This cannot be undone.";
  if (typeof confirm === "function" && !confirm(question)) return;
  $("delete").disabled = true;
  try {
    await api(`v1/jobs/${encodeURIComponent(job.id)}/record`, { method: "DELETE" });
  } catch (error) {
    if (job === current) {
      showJobError(error.code, error.message);
      $("delete").disabled = false;
    }
    return;
  }
  forgetStored(job.id);
  if (job === current) closeJob();
  $("jobs-announce").textContent = `Job ${job.id} deleted.`;
  $("jobs-title").focus();
}

// ---------- start ----------

document.addEventListener("DOMContentLoaded", () => {
  setupKey();
  $("model").addEventListener("change", () => {
    clearFormError();
    renderFields();
  });
  $("job-form").addEventListener("submit", submit);
  $("cancel").addEventListener("click", cancel);
  $("delete").addEventListener("click", deleteJob);
  renderJobs();
  loadModels();
  loadJobs();
});
