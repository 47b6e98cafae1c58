// Typeset the math that pymdownx.arithmatex marks (\( \) inline, \[ \] display) with
// KaTeX, on every page load; main.html loads KaTeX only on pages that have math.
document$.subscribe(({ body }) => {
  for (const element of body.querySelectorAll(".arithmatex")) {
    renderMathInElement(element, {
      delimiters: [
        { left: "\\(", right: "\\)", display: false },
        { left: "\\[", right: "\\]", display: true },
      ],
      throwOnError: true,
    });
  }
});
