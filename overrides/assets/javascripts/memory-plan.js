// The memory calculator of "Will it fit?": evaluates jaxpar.memory_plan's formula, which the
// site's build puts into the page as JSON (tools/sitetools/calculator.py), for the reader's
// inputs. The same expressions, in the same order, are what the tests check against XLA.
// Every text shown comes from the page (its labels, and the data-msg-* attributes of
// #memory-plan), so that each language's page reads in its language. No request is made.
(() => {
  "use strict";
  const root = document.getElementById("memory-plan");
  const source = document.getElementById("memory-plan-data");
  if (!root || !source) return;
  const { formula, presets, targets } = JSON.parse(source.textContent);
  const GIB = 2 ** 30;
  const gib = (bytes) => (bytes / GIB).toFixed(2); // the same in every language
  const form = root.querySelector("form");
  const field = (name) => form.elements.namedItem(name);
  const MODEL = ["vocab", "d_model", "layers", "heads", "kv_heads", "d_ff"];
  const WHOLE = [...MODEL, "seq_len", "data", "fsdp", "tensor", "batch", "microbatches"];

  // Expressions: numbers, names, + - * /, unary minus, parentheses and calls of the
  // formula's functions; parsed by recursive descent (no eval).
  const FUNCTIONS = { max: Math.max, min: Math.min, ceil: Math.ceil };
  function evaluate(text, values) {
    const tokens = text.match(/\d+(?:\.\d+)?|[A-Za-z_]\w*|[-+*/(),]/g) || [];
    let at = 0;
    const peek = () => tokens[at];
    const take = (expected) => {
      const token = tokens[at++];
      if (expected !== undefined && token !== expected) {
        throw new Error(`${text}: expected ${expected}, got ${token}`);
      }
      return token;
    };
    function sum() {
      let value = product();
      while (peek() === "+" || peek() === "-") {
        value = take() === "+" ? value + product() : value - product();
      }
      return value;
    }
    function product() {
      let value = unary();
      while (peek() === "*" || peek() === "/") {
        value = take() === "*" ? value * unary() : value / unary();
      }
      return value;
    }
    function unary() {
      if (peek() === "-") {
        take();
        return -unary();
      }
      return atom();
    }
    function atom() {
      const token = take();
      if (token === "(") {
        const value = sum();
        take(")");
        return value;
      }
      if (/^\d/.test(token)) return Number(token);
      if (peek() === "(" && Object.hasOwn(FUNCTIONS, token)) {
        take("(");
        const args = [sum()];
        while (peek() === ",") {
          take();
          args.push(sum());
        }
        take(")");
        return FUNCTIONS[token](...args);
      }
      if (Object.hasOwn(values, token)) return values[token];
      throw new Error(`${text}: ${token} has no value`);
    }
    const value = sum();
    if (at !== tokens.length) throw new Error(`${text}: unexpected ${peek()}`);
    return value;
  }

  function message(name, values) {
    const template = root.dataset[name] || name;
    return template.replace(/\{(\w+)\}/g, (_, key) => String(values[key]));
  }

  // The checks of jaxpar.memory_plan._variables, in its order, with the page's messages.
  function problem(v, target) {
    for (const name of WHOLE) {
      if (!Number.isInteger(v[name]) || v[name] < 1) return message("msgPositive", { name });
    }
    const rules = [
      [v.d_model % v.heads, "msgHeads"],
      [v.heads % v.kv_heads, "msgKvHeads"],
      [v.kv_heads % v.tensor, "msgKvTensor"],
      [v.d_ff % v.tensor, "msgFfTensor"],
      [v.vocab % v.tensor, "msgVocabTensor"],
      [v.d_model % v.fsdp, "msgFsdp"],
      [v.batch % (v.data * v.fsdp * v.microbatches), "msgBatch"],
    ];
    const product = v.data * v.fsdp * v.microbatches;
    for (const [remainder, name] of rules) {
      if (remainder) return message(name, { ...v, product });
    }
    const layout = v.data * v.fsdp * v.tensor;
    if (layout !== target.devices) {
      return message("msgDevices", { layout, target: target.name, devices: target.devices });
    }
    return null;
  }

  function inputs() {
    const v = {};
    for (const name of WHOLE) {
      const text = field(name).value.trim();
      v[name] = /^\d+$/.test(text) ? Number(text) : NaN;
    }
    v.tied = field("tied").checked ? 1 : 0;
    v.compute_bytes = field("compute").value === "float32" ? 4 : 2;
    v.remat_full = field("remat").value === "full" ? 1 : 0;
    return v;
  }

  const cells = {};
  for (const row of root.querySelectorAll("tr[data-term]")) {
    cells[row.dataset.term] = row.querySelector("td");
  }
  const verdict = root.querySelector(".memory-plan__verdict");
  const note = root.querySelector(".memory-plan__note");
  const bar = root.querySelector(".memory-plan__bar > div");

  function show(name, bytes) {
    cells[name].textContent = bytes === null ? "—" : `${gib(bytes)} GiB`;
    if (bytes === null) delete cells[name].dataset.bytes;
    else cells[name].dataset.bytes = String(bytes);
  }

  function update() {
    const target = { name: field("target").value, ...targets[field("target").value] };
    const v = inputs();
    show("memory", target.memory_bytes);
    const wrong = problem(v, target);
    root.classList.toggle("memory-plan--invalid", Boolean(wrong));
    if (wrong) {
      for (const name of [...formula.terms, formula.total]) show(name, null);
      verdict.textContent = wrong;
      note.textContent = "";
      bar.style.width = "0";
      return;
    }
    const values = { ...v };
    for (const { name, expression } of formula.definitions) {
      values[name] = evaluate(expression, values);
    }
    for (const name of formula.terms) show(name, Math.round(values[name]));
    const total = Math.round(values[formula.total]);
    show(formula.total, total);
    const fits = total <= target.memory_bytes;
    root.classList.toggle("memory-plan--short", !fits);
    bar.style.width = `${Math.min(total / target.memory_bytes, 1) * 100}%`;
    const memory = gib(target.memory_bytes);
    verdict.textContent = fits
      ? message("msgFits", { left: gib(target.memory_bytes - total), memory })
      : message("msgShort", { short: gib(total - target.memory_bytes), memory });
    // data-msg-tolerance-xla-gpu is dataset.msgToleranceXlaGpu
    const backend = target.backend.toLowerCase().split(/[^a-z]+/);
    const key = backend.map((word) => word[0].toUpperCase() + word.slice(1)).join("");
    note.textContent = message(`msgTolerance${key}`, {});
  }

  function usePreset() {
    const sizes = presets[field("preset").value];
    if (!sizes) return;
    for (const name of MODEL) field(name).value = sizes[name];
    field("tied").checked = sizes.tied_embeddings;
  }

  const targetSelect = field("target");
  for (const [name, target] of Object.entries(targets)) {
    const option = new Option(
      `${name} (${target.devices} × ${gib(target.memory_bytes)} GiB)`,
      name,
    );
    targetSelect.add(option);
  }
  targetSelect.value = Object.hasOwn(targets, "h100-8") ? "h100-8" : targetSelect.options[0].value;
  usePreset();
  field("seq_len").value = presets[field("preset").value].seq_len;

  form.addEventListener("input", (event) => {
    const name = event.target.name;
    if (name === "preset") usePreset();
    else if (MODEL.includes(name) || name === "tied") field("preset").value = "custom";
    update();
  });
  form.addEventListener("change", update);
  root.hidden = false;
  update();
})();
