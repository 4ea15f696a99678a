"""course_lib.show: what notebooks display."""

import numpy as np
import pytest
import torch

import course_lib
from course_lib.show import html_table, max_diff, moving_average, show_source


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


def test_moving_average_matches_a_loop_and_rejects_bad_windows():
    v = np.random.default_rng(0).normal(size=37)
    loop = [v[i : i + 5].mean() for i in range(len(v) - 4)]
    assert np.allclose(moving_average(v, 5), loop)
    assert np.allclose(moving_average(torch.arange(4.0), 1), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="between 1 and"):
        moving_average([1.0, 2.0], k=3)
    with pytest.raises(ValueError, match="1-d"):
        moving_average(np.zeros((2, 3)))
