// Accessibility fixes for what the theme and the widget renderer write (checked by
// axe-core in tests/test_browser.py on every page, light and dark):
// - the search and light/dark buttons' accessible names ("Search", "light/dark") must
//   contain their visible text ("Search Ctrl+K", "Light", WCAG 2.5.3): each button
//   is named by its content instead, as is a hidden cell's "Show code cell source"
//   toggle (named "Toggle hidden content");
// - docutils marks the bibliography as role="list" without list items: a plain block;
// - ipywidgets' sliders (role="slider") get the text of their widget's label as
//   their name, so a screen reader says what each slider sets;
// - the plots a widget draws (an <img> with no alt, from the embedded widget state)
//   get the written alt text of their notebook cell (metadata course.widget_alt),
//   which book/_ext/course_widget_alt.py leaves in the cell's output as
//   <div class="course-widget-alt" hidden data-alt="...">;
// - the language switch (book/_ext/course_i18n.py) opens the other language's page in
//   the same tab: the theme writes every header link with target="_blank".
(function () {
  "use strict";
  function fix(root) {
    var named =
      ".search-button__button[aria-label], .theme-switch-button[aria-label], " +
      "details > summary[aria-label]";
    root.querySelectorAll(named).forEach(function (b) {
      b.removeAttribute("aria-label");
    });
    root.querySelectorAll(".citation-list[role='list']").forEach(function (e) {
      e.removeAttribute("role");
    });
    root.querySelectorAll("a.btn-language-switch[target]").forEach(function (a) {
      a.removeAttribute("target");
    });
    root.querySelectorAll("[role='slider']:not([aria-label]):not([aria-labelledby])").forEach(
      function (s) {
        var widget = s.closest(".widget-slider, .widget-inline-hbox, .jupyter-widgets");
        var label = widget && widget.querySelector(".widget-label");
        var text = label && label.textContent.trim();
        s.setAttribute("aria-label", text || "slider");
      }
    );
    root.querySelectorAll(".course-widget-alt[data-alt]").forEach(function (marker) {
      var output = marker.closest(".cell_output") || marker.parentElement;
      var alt = marker.getAttribute("data-alt");
      output.querySelectorAll("img").forEach(function (img) {
        if (img.getAttribute("alt") !== alt) {
          img.setAttribute("alt", alt);
        }
      });
    });
  }
  function start() {
    fix(document);
    // widgets are drawn after the page loads: fix what they add as they add it
    new MutationObserver(function () { fix(document); }).observe(document.body, {
      childList: true,
      subtree: true,
    });
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
