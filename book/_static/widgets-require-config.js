// Loaded between require.js and the vendored @jupyter-widgets/html-manager.
// The manager finds its fonts relative to its own AMD module URL, which by
// default is resolved against the page's folder; map the module to the
// folder this file sits in, so the fonts load from _static on every page.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "");
  require.config({
    paths: { "@jupyter-widgets/html-manager/dist": here + "vendor/html-manager" },
  });
})();

// The html-manager typesets widget labels with MathJax 2's API
// (MathJax.Hub.Queue); the site loads MathJax 3, which has no Hub, so each
// widget label raised "Cannot read properties of undefined (reading 'Queue')".
// Map that call onto MathJax 3. MathJax itself loads deferred, so the shim is
// installed again once the document is parsed, before widgets are rendered.
(function () {
  function shim() {
    if (window.MathJax && !window.MathJax.Hub) {
      window.MathJax.Hub = {
        Queue: function (command) {
          var element = command && command[2];
          if (window.MathJax.typesetPromise) {
            window.MathJax.typesetPromise(element ? [element] : undefined);
          }
        },
      };
    }
  }
  shim();
  document.addEventListener("DOMContentLoaded", shim);
})();
