/* SPDX-License-Identifier: BSD-2-Clause */

/*
 * The directives of the servers profiles are pushed to, Pyroscope's and
 * OTLP's alike: the URL, Pyroscope's endpoint label's bound, and the
 * headers the pushes carry (basic auth, a bearer token, a tenant, any
 * other), with secrets read from a file or the environment when the
 * configuration is read, never from the configuration itself.
 */

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include "ngx_http_profiling_module.h"


#define NGX_HTTP_PROFILING_SECRET_MAX              4096
#define NGX_HTTP_PROFILING_PYROSCOPE_ENDPOINTS_MAX  1000


/* Headers the uploader writes itself, or curl does. */
static const char  *ngx_http_profiling_push_own_headers[] = {
    "Content-Type", "Content-Length", "Content-Encoding",
    "Transfer-Encoding", "Host", NULL
};


/* The server's part of the main conf a directive sets (its offset). */
static ngx_http_profiling_push_conf_t *
ngx_http_profiling_push_conf(ngx_command_t *cmd, void *conf)
{
    return (ngx_http_profiling_push_conf_t *) ((char *) conf + cmd->offset);
}


/*
 * Whether a directive (cmd, its first argument arg) may set the header
 * name: not when another one set it already (one Authorization: basic
 * auth, a bearer token or a header; one X-Scope-OrgID). NGX_CONF_OK, or
 * NGX_CONF_ERROR logged naming both directives.
 */
static char *
ngx_http_profiling_push_header_free(ngx_conf_t *cf,
    ngx_http_profiling_push_conf_t *pmcf, ngx_command_t *cmd, ngx_str_t *arg,
    const char *name)
{
    size_t      len;
    ngx_uint_t  i;
    ngx_str_t  *h, *by;

    if (pmcf->headers == NULL) {
        return NGX_CONF_OK;
    }

    len = ngx_strlen(name);
    h = pmcf->headers->elts;
    by = pmcf->header_directives->elts;

    for (i = 0; i < pmcf->headers->nelts; i++) {
        if (h[i].len > len && h[i].data[len] == ':'
            && ngx_strncasecmp(h[i].data, (u_char *) name, len) == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V %V\" sets the "
                               "\"%*s\" header that \"%V\" set already: "
                               "give one of them", &cmd->name, arg, len,
                               h[i].data, &by[i]);
            return NGX_CONF_ERROR;
        }
    }

    return NGX_CONF_OK;
}


/* A header "Name: value" added to the pushes' (values never logged), and
   the directive that set it. */
static char *
ngx_http_profiling_push_header(ngx_conf_t *cf,
    ngx_http_profiling_push_conf_t *pmcf, ngx_command_t *cmd,
    const char *name, ngx_str_t *value)
{
    u_char     *p;
    size_t      len;
    ngx_str_t  *h, *by;

    for (p = value->data; p < value->data + value->len; p++) {
        if (*p == '\r' || *p == '\n' || *p == '\0') {
            return "a header's value has no line break or NUL";
        }
    }

    if (pmcf->headers == NULL) {
        pmcf->headers = ngx_array_create(cf->pool, 4,
                                                   sizeof(ngx_str_t));
        pmcf->header_directives = ngx_array_create(cf->pool, 4,
                                                   sizeof(ngx_str_t));
        if (pmcf->headers == NULL
            || pmcf->header_directives == NULL)
        {
            return NGX_CONF_ERROR;
        }
    }

    h = ngx_array_push(pmcf->headers);
    by = ngx_array_push(pmcf->header_directives);
    if (h == NULL || by == NULL) {
        return NGX_CONF_ERROR;
    }

    *by = cmd->name;

    len = ngx_strlen(name) + 2 + value->len;
    h->data = ngx_pnalloc(cf->pool, len + 1);
    if (h->data == NULL) {
        return NGX_CONF_ERROR;
    }

    p = ngx_sprintf(h->data, "%s: %V", name, value);
    *p = '\0';
    h->len = len;

    /* Each of them needs the URL (checked once the block is read). */
    if (pmcf->needs_url.data == NULL) {
        pmcf->needs_url = cmd->name;
    }

    return NGX_CONF_OK;
}


/*
 * A secret: "file:/path" (the file's content, a final line break
 * removed) or "env:NAME" (the variable, read now, in the master). The
 * error names the file or variable, never the secret.
 */
static char *
ngx_http_profiling_secret(ngx_conf_t *cf, ngx_str_t *source,
    ngx_str_t *secret)
{
    char       *value;
    ssize_t     n;
    ngx_fd_t    fd;
    ngx_str_t   path;

    if (source->len > 4 && ngx_strncmp(source->data, "env:", 4) == 0) {
        value = getenv((char *) source->data + 4);
        if (value == NULL || value[0] == '\0') {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "the environment "
                               "variable \"%s\" is not set or empty",
                               source->data + 4);
            return NGX_CONF_ERROR;
        }

        secret->len = ngx_strlen(value);
        secret->data = ngx_pnalloc(cf->pool, secret->len);
        if (secret->data == NULL) {
            return NGX_CONF_ERROR;
        }
        ngx_memcpy(secret->data, value, secret->len);

        return NGX_CONF_OK;
    }

    if (!(source->len > 5 && ngx_strncmp(source->data, "file:", 5) == 0)) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "a secret must be "
                           "\"file:/path\" or \"env:NAME\", never the "
                           "secret itself");
        return NGX_CONF_ERROR;
    }

    path.data = source->data + 5;
    path.len = source->len - 5;

    if (ngx_conf_full_name(cf->cycle, &path, 1) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    fd = ngx_open_file(path.data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", &path);
        return NGX_CONF_ERROR;
    }

    secret->data = ngx_pnalloc(cf->pool, NGX_HTTP_PROFILING_SECRET_MAX);
    if (secret->data == NULL) {
        ngx_close_file(fd);
        return NGX_CONF_ERROR;
    }

    n = read(fd, secret->data, NGX_HTTP_PROFILING_SECRET_MAX);
    ngx_close_file(fd);

    if (n < 0 || n == NGX_HTTP_PROFILING_SECRET_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, n < 0 ? ngx_errno : 0,
                           "reading the secret in \"%V\" failed%s", &path,
                           n < 0 ? "" : ": longer than 4095 bytes");
        return NGX_CONF_ERROR;
    }

    while (n > 0 && (secret->data[n - 1] == '\n'
                     || secret->data[n - 1] == '\r'))
    {
        n--;
    }

    if (n == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "the secret in \"%V\" is "
                           "empty", &path);
        return NGX_CONF_ERROR;
    }

    secret->len = n;

    return NGX_CONF_OK;
}


/*
 * profiling_pyroscope_url, profiling_otlp_url http://host[:port][/prefix]
 * | https://... | off
 */
char *
ngx_http_profiling_push_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_push_conf_t  *pmcf = ngx_http_profiling_push_conf(cmd,
                                                                     conf);

    u_char       auth[64];
    ngx_str_t   *value;
    const char  *err;

    if (pmcf->url.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") != 0) {
        if (ngx_strlchr(value[1].data, value[1].data + value[1].len, '@')
            != NULL)
        {
            /* "profiling_<server>_url": its "_basic_auth" */
            *ngx_snprintf(auth, sizeof(auth) - 1,
                          "credentials go in %*s_basic_auth%Z",
                          cmd->name.len - 4, cmd->name.data) = '\0';
            err = (const char *) auth;

        } else {
            err = ngx_http_profiling_check_url(cf->pool, &value[1], 0);
        }

        if (err != NULL) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive "
                               "(%s): it must be "
                               "\"http://host[:port][/prefix]\", "
                               "\"https://host[:port][/prefix]\" or \"off\"",
                               &value[1], &cmd->name, err);
            return NGX_CONF_ERROR;
        }
    }

    pmcf->url = value[1];

    return NGX_CONF_OK;
}


/* profiling_pyroscope_endpoints number: 0 (no label) to 1000 */
char *
ngx_http_profiling_pyroscope_endpoints(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (pmcf->pyroscope_endpoints != NGX_CONF_UNSET) {
        return "is duplicate";
    }

    value = cf->args->elts;
    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n > NGX_HTTP_PROFILING_PYROSCOPE_ENDPOINTS_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive: it "
                           "must be a number from 0 (no endpoint label) to "
                           "%d", &value[1], &cmd->name,
                           NGX_HTTP_PROFILING_PYROSCOPE_ENDPOINTS_MAX);
        return NGX_CONF_ERROR;
    }

    pmcf->pyroscope_endpoints = n;

    if (pmcf->pyroscope.needs_url.data == NULL) {
        pmcf->pyroscope.needs_url = cmd->name;
    }

    return NGX_CONF_OK;
}


/* profiling_pyroscope_basic_auth, profiling_otlp_basic_auth user
   file:/path | env:NAME */
char *
ngx_http_profiling_push_basic_auth(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_push_conf_t  *pmcf = ngx_http_profiling_push_conf(cmd,
                                                                     conf);

    u_char     *p;
    ngx_str_t  *value, secret, plain, encoded;

    value = cf->args->elts;

    if (value[1].len == 0
        || ngx_strlchr(value[1].data, value[1].data + value[1].len, ':')
           != NULL)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid user \"%V\" in "
                           "\"%V\" directive: it has no ':'", &value[1],
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    if (ngx_http_profiling_push_header_free(cf, pmcf, cmd, &value[1],
                                            "Authorization")
        != NGX_CONF_OK
        || ngx_http_profiling_secret(cf, &value[2], &secret) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    plain.len = value[1].len + 1 + secret.len;
    plain.data = ngx_pnalloc(cf->pool, plain.len);
    encoded.len = sizeof("Basic ") - 1 + ngx_base64_encoded_length(plain.len);
    encoded.data = ngx_pnalloc(cf->pool, encoded.len);

    if (plain.data == NULL || encoded.data == NULL) {
        return NGX_CONF_ERROR;
    }

    p = ngx_cpymem(plain.data, value[1].data, value[1].len);
    *p++ = ':';
    ngx_memcpy(p, secret.data, secret.len);

    p = ngx_cpymem(encoded.data, "Basic ", sizeof("Basic ") - 1);
    secret.data = p;
    ngx_encode_base64(&secret, &plain);
    encoded.len = (p - encoded.data) + secret.len;

    return ngx_http_profiling_push_header(cf, pmcf, cmd, "Authorization",
                                          &encoded);
}


/* profiling_pyroscope_bearer_token, profiling_otlp_bearer_token
   file:/path | env:NAME */
char *
ngx_http_profiling_push_bearer_token(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_push_conf_t  *pmcf = ngx_http_profiling_push_conf(cmd,
                                                                     conf);

    u_char     *p;
    ngx_str_t  *value, secret, header;

    value = cf->args->elts;

    if (ngx_http_profiling_push_header_free(cf, pmcf, cmd, &value[1],
                                            "Authorization")
        != NGX_CONF_OK
        || ngx_http_profiling_secret(cf, &value[1], &secret) != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    header.len = sizeof("Bearer ") - 1 + secret.len;
    header.data = ngx_pnalloc(cf->pool, header.len);
    if (header.data == NULL) {
        return NGX_CONF_ERROR;
    }

    p = ngx_cpymem(header.data, "Bearer ", sizeof("Bearer ") - 1);
    ngx_memcpy(p, secret.data, secret.len);

    return ngx_http_profiling_push_header(cf, pmcf, cmd, "Authorization",
                                          &header);
}


/* profiling_pyroscope_tenant, profiling_otlp_tenant id: X-Scope-OrgID */
char *
ngx_http_profiling_push_tenant(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_push_conf_t  *pmcf = ngx_http_profiling_push_conf(cmd,
                                                                     conf);

    char       *rv;
    ngx_str_t  *value;

    value = cf->args->elts;

    if (ngx_http_profiling_push_header_free(cf, pmcf, cmd, &value[1],
                                            "X-Scope-OrgID")
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    rv = ngx_http_profiling_push_header(cf, pmcf, cmd, "X-Scope-OrgID",
                                        &value[1]);
    if (rv != NGX_CONF_OK && rv != NGX_CONF_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid value \"%V\" in "
                           "\"%V\" directive: %s", &value[1], &cmd->name,
                           rv);
        return NGX_CONF_ERROR;
    }

    return rv;
}


/*
 * profiling_pyroscope_header, profiling_otlp_header name value: value as
 * it is, or a secret ("file:/path", "env:NAME").
 */
char *
ngx_http_profiling_push_header_directive(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_push_conf_t  *pmcf = ngx_http_profiling_push_conf(cmd,
                                                                     conf);

    u_char       *p;
    char         *rv;
    ngx_str_t    *value, header;
    const char  **own;

    value = cf->args->elts;

    for (p = value[1].data; p < value[1].data + value[1].len; p++) {
        if (*p <= ' ' || *p >= 0x7f || *p == ':') {
            break;
        }
    }

    if (value[1].len == 0 || p < value[1].data + value[1].len) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid header name "
                           "\"%V\" in \"%V\" directive", &value[1],
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    for (own = ngx_http_profiling_push_own_headers; *own != NULL; own++) {
        if (value[1].len == ngx_strlen(*own)
            && ngx_strncasecmp(value[1].data, (u_char *) *own, value[1].len)
               == 0)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid header name "
                               "\"%V\" in \"%V\" directive: the pushes "
                               "set it themselves", &value[1], &cmd->name);
            return NGX_CONF_ERROR;
        }
    }

    if (ngx_http_profiling_push_header_free(cf, pmcf, cmd, &value[1],
                                            (char *) value[1].data)
        != NGX_CONF_OK)
    {
        return NGX_CONF_ERROR;
    }

    header = value[2];

    if ((value[2].len > 4 && ngx_strncmp(value[2].data, "env:", 4) == 0)
        || (value[2].len > 5 && ngx_strncmp(value[2].data, "file:", 5) == 0))
    {
        if (ngx_http_profiling_secret(cf, &value[2], &header)
            != NGX_CONF_OK)
        {
            return NGX_CONF_ERROR;
        }
    }

    rv = ngx_http_profiling_push_header(cf, pmcf, cmd,
                                        (char *) value[1].data, &header);
    if (rv != NGX_CONF_OK && rv != NGX_CONF_ERROR) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "invalid value in \"%V\" "
                           "directive for the header \"%V\": %s",
                           &cmd->name, &value[1], rv);
        return NGX_CONF_ERROR;
    }

    return rv;
}


/* The server's directives but the URL need it: refused without it. */
char *
ngx_http_profiling_push_check(ngx_conf_t *cf,
    ngx_http_profiling_push_conf_t *push, const char *url_directive,
    const char *server)
{
    if (push->needs_url.data == NULL
        || (push->url.data != NULL
            && ngx_strcmp(push->url.data, "off") != 0))
    {
        return NGX_CONF_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0, "\"%V\" is set but "
                       "\"%s\" is %s: nothing is pushed to %s",
                       &push->needs_url, url_directive,
                       push->url.data == NULL ? "not" : "off", server);

    return NGX_CONF_ERROR;
}
