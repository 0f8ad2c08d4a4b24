"""The indexer's client interface: each engine's exceptions become the indexer's errors, carrying
their data, and the factory stops at once when the engine's client is missing or too new."""

from __future__ import annotations

import subprocess
import sys

import elastic_transport
import pytest
from elasticsearch import ApiError
from opensearchpy import exceptions as os_errors

from neardup.config import load_config
from neardup.indexer.client import make_client, max_clause_count
from neardup.indexer.clients import elasticsearch as es_client
from neardup.indexer.clients import opensearch as os_client
from neardup.indexer.errors import (
    ClusterApiError,
    ClusterConnectionError,
    ClusterError,
    ClusterTimeout,
    ClusterTlsError,
    JobError,
    explain,
)
from neardup.indexer.reader import check_page_order, page_order
from neardup.indexer.retry import is_transient
from neardup.upstream import ClusterInfo

MISSING = {"error": {"type": "index_not_found_exception", "reason": "no such index [i]", "index": "i"},
           "status": 404}


def es_api_error(status: int, body: object) -> ApiError:
    meta = elastic_transport.ApiResponseMeta(status, "1.1", elastic_transport.HttpHeaders(), 0.0, None)
    return ApiError("x", meta, body)


@pytest.mark.parametrize("translated, api_error, connection, timeout, tls", [
    (es_client.translated, es_api_error(404, MISSING), elastic_transport.ConnectionError("refused"),
     elastic_transport.ConnectionTimeout("slow"), elastic_transport.TlsError("bad cert")),
    (os_client.translated, os_errors.NotFoundError(404, "index_not_found_exception", MISSING),
     os_errors.ConnectionError("N/A", "refused", OSError("refused")),
     os_errors.ConnectionTimeout("TIMEOUT", "slow", OSError("slow")),
     os_errors.SSLError("N/A", "bad cert", OSError("bad cert"))),
], ids=["elasticsearch", "opensearch"])
def test_each_clients_exceptions_become_the_indexers_errors(translated, api_error, connection, timeout, tls):
    error = translated(api_error)
    assert isinstance(error, ClusterApiError)
    assert (error.status, error.body, error.error_type, error.reason) == (
        404, MISSING, "index_not_found_exception", "no such index [i]")
    assert explain(error, "http://es") == "no such index: i (at http://es)"
    refused, slow, bad_cert = translated(connection), translated(timeout), translated(tls)
    assert type(refused) is ClusterConnectionError and "refused" in refused.message
    assert type(slow) is ClusterTimeout and "slow" in slow.message
    assert type(bad_cert) is ClusterTlsError and "bad cert" in bad_cert.message
    assert is_transient(refused) and is_transient(slow) and not is_transient(bad_cert)
    assert explain(bad_cert, "https://es").startswith("TLS connection to the cluster at https://es failed")
    assert translated(ValueError("not the client's")) is None


def test_an_opensearch_error_without_a_json_body_keeps_its_type_and_text():
    error = os_client.translated(os_errors.TransportError(502, "Bad Gateway", "upstream gone"))
    assert isinstance(error, ClusterApiError) and error.status == 502
    assert (error.error_type, error.reason) == ("Bad Gateway", "upstream gone")
    assert is_transient(error)


def test_errors_that_are_no_answer_nor_a_status_are_cluster_errors():
    for error in (es_client.translated(elastic_transport.SerializationError("bad json")),
                  os_client.translated(os_errors.SerializationError("bad json"))):
        assert type(error) is ClusterError and "bad json" in str(error)
        assert not is_transient(error)


def test_elasticsearch_py_newer_than_the_server_stops_naming_both_versions():
    older = es_client.CLIENT_MAJOR - 1
    cluster = ClusterInfo("http://es", "Elasticsearch", f"{older}.19.21")
    with pytest.raises(JobError) as caught:
        make_client(load_config().upstream, cluster)
    message = str(caught.value)
    assert f"Elasticsearch {older}.19.21" in message and f"elasticsearch-py {es_client.CLIENT_MAJOR}." in message
    assert "pip install 'elasticsearch>=" in message
    if older == 8:
        assert "pip install 'elasticsearch>=8.12,<9'" in message
    for fine in (f"{es_client.CLIENT_MAJOR}.0.0", f"{es_client.CLIENT_MAJOR + 1}.1.0", None):
        assert es_client.version_mismatch(ClusterInfo("http://es", "Elasticsearch", fine)) is None


def test_each_engine_gets_its_own_client():
    upstream = load_config().upstream
    for engine, kind in (("Elasticsearch", es_client.ElasticsearchClient), ("OpenSearch", os_client.OpenSearchClient)):
        cluster = ClusterInfo("http://es", engine, f"{es_client.CLIENT_MAJOR}.0.0")
        client = make_client(upstream, cluster)
        try:
            assert type(client) is kind and client.engine is cluster
        finally:
            client.close()


def test_opensearch_without_opensearch_py_stops_with_the_install_hint():
    """The extra is optional: without it, a job on OpenSearch stops at once and says how to install it."""
    code = ("import sys; sys.modules['opensearchpy'] = None\n"
            "from neardup.config import load_config\n"
            "from neardup.indexer.client import make_client\n"
            "from neardup.indexer.errors import JobError\n"
            "from neardup.upstream import ClusterInfo\n"
            "try:\n"
            "    make_client(load_config().upstream, ClusterInfo('http://os', 'OpenSearch', '3.8.0'))\n"
            "except JobError as exc:\n"
            "    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert "OpenSearch 3.8.0" in result.stdout and "pip install 'neardup[opensearch]'" in result.stdout


class SettingsOnly:
    """A client that answers only the cluster-settings request, with ``defaults``."""

    def __init__(self, engine: ClusterInfo, defaults: dict) -> None:
        self.engine = engine
        self.cluster = self
        self.defaults = defaults

    def get_settings(self, *, include_defaults: bool = False, filter_path: object = None) -> dict:
        return {"persistent": {}, "transient": {}, "defaults": self.defaults}


def test_opensearch_2_reads_in_id_order_and_stops_first_if_the_cluster_cannot_sort_on_id():
    off = {"indices": {"id_field_data": {"enabled": "false"}}}
    opensearch_2 = ClusterInfo("http://os", "OpenSearch", "2.19.6")
    assert page_order(opensearch_2) == {"_id": {"order": "asc", "unmapped_type": "keyword"}}
    with pytest.raises(JobError, match=r"OpenSearch 2\.19\.6 has no _shard_doc.*indices\.id_field_data\.enabled"):
        check_page_order(SettingsOnly(opensearch_2, off))
    check_page_order(SettingsOnly(opensearch_2, {"indices": {"id_field_data": {"enabled": "true"}}}))
    for engine in (ClusterInfo("http://os", "OpenSearch", "3.8.0"), ClusterInfo("http://es", "Elasticsearch", "8.19.21")):
        assert page_order(engine) == "_shard_doc"
        check_page_order(SettingsOnly(engine, off))   # not asked: _shard_doc needs no field data
    assert max_clause_count(SettingsOnly(opensearch_2, {"indices": {"query": {"bool": {"max_clause_count": "1024"}}}})) == 1024
