// The pages on paper (with print.css): a reader who prints in dark mode gets the light
// theme's colours, syntax highlighting included, and the dark mode back afterwards.
(function () {
  let before = null;
  window.addEventListener("beforeprint", () => {
    before = document.documentElement.dataset.theme;
    document.documentElement.dataset.theme = "light";
  });
  window.addEventListener("afterprint", () => {
    if (before) document.documentElement.dataset.theme = before;
    before = null;
  });
})();
