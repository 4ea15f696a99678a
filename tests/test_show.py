"""course_lib.show: what notebooks display."""

import numpy as np
import pytest
import torch

import course_lib
from course_lib.show import html_table, max_diff, moving_average, show_source


def test_show_source_returns_the_source():
    code = show_source(max_diff)
    assert isinstance(code, str) and code.startswith("def max_diff")
    with pytest.raises(TypeError, match="needs a function, class or module"):
        show_source(3)


def test_show_source_displays_in_a_kernel_wherever_it_stands():
    """In a notebook the code block appears even when the call is not the cell's last
    line (a returned object would be shown only there), and exactly once."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(
            "import course_lib\n"
            "course_lib.show_source(course_lib.max_diff)\n"
            "course_lib.show_source(course_lib.html_table)\n"
            "x = 1"
        )
    ]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    shown = [
        o for o in nb.cells[0].outputs if o["output_type"] in ("display_data", "execute_result")
    ]
    texts = [
        str(o["data"].get("text/plain", "")) + str(o["data"].get("text/html", "")) for o in shown
    ]
    assert len(shown) == 2, f"expected two code blocks, got {len(shown)}: {texts}"
    assert "def max_diff" in texts[0] and "def html_table" in texts[1]


def test_html_table():
    table = html_table(["a", "b"], [[1, "x"], [2.5, "<i>y</i>"]], caption="two rows")
    html = table.data
    assert html.startswith("<p>two rows</p><table>")
    assert html.count("<tr>") == 3 and "<th>b</th>" in html and "<td>2.5</td>" in html
    with pytest.raises(ValueError, match="row 1 has 1 cells but the header has 2"):
        html_table(["a", "b"], [[1, 2], [3]])
    assert course_lib.html_table is html_table


def test_max_diff():
    a = torch.tensor([1.0, 2.0, 3.0])
    assert max_diff(a, a + torch.tensor([0.0, -0.5, 0.25])) == 0.5
    assert max_diff((a, a), (a, a * 2)) == 3.0
    with pytest.raises(ValueError, match="shapes differ"):
        max_diff(a, a[:2])
    with pytest.raises(ValueError, match="tuples of equal length"):
        max_diff((a,), (a, a))


def test_moving_average_matches_a_loop_and_rejects_bad_windows():
    v = np.random.default_rng(0).normal(size=37)
    loop = [v[i : i + 5].mean() for i in range(len(v) - 4)]
    assert np.allclose(moving_average(v, 5), loop)
    assert np.allclose(moving_average(torch.arange(4.0), 1), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="between 1 and"):
        moving_average([1.0, 2.0], k=3)
    with pytest.raises(ValueError, match="1-d"):
        moving_average(np.zeros((2, 3)))
