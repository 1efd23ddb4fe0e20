"""_config.yml as Jupyter Book hands it to Sphinx (eco.md §4, §7): each page names its
published address (html.baseurl, its canonical link) and has an "Edit this page" link to
its source in the repository."""
from pathlib import Path

from jupyter_book.config import get_final_config

ROOT = Path(__file__).resolve().parents[2]


def sphinx_config():
    """The Sphinx configuration that `jupyter-book build` makes of _config.yml."""
    config, *_ = get_final_config(user_yaml=ROOT / '_config.yml', sourcedir=ROOT,
                                  cli_config={'latex_individualpages': False})
    return config


def test_the_canonical_address_is_where_pages_yml_publishes():
    config = sphinx_config()
    owner, repo = config['html_theme_options']['repository_url'].split('/')[-2:]
    assert config.get('html_baseurl') == f'https://{owner.lower()}.github.io/{repo}/'


def test_the_edit_link_is_the_pages_file_in_the_repository():
    options = sphinx_config()['html_theme_options']
    assert options.get('use_edit_page_button') is True
    # the link is <url>/edit/<branch>/<path_to_docs><page's source path>: the book's
    # root is the repository's, so it is book/NN_x.ipynb, a file that exists
    assert options['path_to_docs'] == ''
