"""_config.yml as Jupyter Book hands it to Sphinx (eco.md §4, §7): each page names its
published address (html.baseurl, its canonical link), has an "Edit this page" link to
its source in the repository, and its Colab and download buttons open the reader
copies."""
from jupyter_book.config import get_final_config

from tests.repo.helpers import ROOT
from tools import reader_copies


def test_the_pages_link_where_they_are_published_edited_and_run():
    config, *_ = get_final_config(user_yaml=ROOT / '_config.yml', sourcedir=ROOT,
                                  cli_config={'latex_individualpages': False})
    # where pages.yml publishes (test_workflows.py: the README and the copies link it)
    assert config.get('html_baseurl') == reader_copies.book_url()
    options = config['html_theme_options']
    assert options.get('use_edit_page_button') is True
    # the link is <url>/edit/<branch>/<path_to_docs><page's source path>: the book's
    # root is the repository's, so it is book/NN_x.ipynb, a file that exists
    assert options['path_to_docs'] == ''
    # the buttons open notebooks/, the tool's folder (test_browser_book_pages.py
    # follows them), which is no page of the book
    assert config['reader_copies'] == reader_copies.OUT == 'notebooks'
    assert reader_copies.OUT in config['exclude_patterns']
