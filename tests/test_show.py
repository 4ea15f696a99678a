"""course_lib.show: what notebooks display."""

import pytest
import torch

import course_lib
from course_lib.show import html_table, max_diff, show_source


def test_show_source_returns_the_source():
    code = show_source(max_diff)
    assert "def max_diff" in getattr(code, "data", code)
    with pytest.raises(TypeError, match="needs a function, class or module"):
        show_source(3)


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
