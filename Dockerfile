# neardup: the indexer and the proxy in one image; the command picks the job:
#   docker run IMAGE proxy            (default)
#   docker run IMAGE index --index NAME
# Configure with NEARDUP_<SECTION>__<KEY> environment variables (see docs/configuration.md).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    NEARDUP_CONFIG=/etc/neardup/neardup.toml \
    NEARDUP_PROXY__HOST=0.0.0.0 \
    NUMBA_CACHE_DIR=/var/cache/neardup/numba

WORKDIR /src
COPY pyproject.toml README.md ./
COPY neardup ./neardup
COPY fingerprint ./fingerprint
COPY indexer ./indexer
COPY proxy ./proxy
RUN pip install --no-cache-dir ".[opensearch]" && rm -rf /src/build
COPY config/neardup.toml /etc/neardup/neardup.toml

RUN useradd --system --no-create-home --shell /usr/sbin/nologin neardup
# Compile the fingerprint kernels once at build time (about 4 s), so the indexer's processes
# load machine code from the cache instead of compiling at every start.
RUN mkdir -p "$NUMBA_CACHE_DIR" \
    && python -c "from neardup.fingerprint import Fingerprinter, FingerprintParams; f = Fingerprinter(FingerprintParams()); f.fingerprint_many(['warm the compiled kernels up once', 'and a second text'])" \
    && chown -R neardup "$NUMBA_CACHE_DIR"
USER neardup
WORKDIR /
EXPOSE 9201
ENTRYPOINT ["neardup"]
CMD ["proxy"]
