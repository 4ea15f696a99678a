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
