/*
 * ngx_http_profiling_module: directives, and the profiler's life in a
 * worker process: started in init_process, a profile closed by a timer
 * every period, the last one written in exit_process.
 */

#include <sys/epoll.h>

#include "ngx_http_profiling_module.h"


#define NGX_HTTP_PROFILING_APM_SOCKET  "/var/run/datadog/apm.socket"


typedef struct {
    ngx_flag_t     enabled_anywhere;
    ngx_str_t      dump_dir;
    ngx_str_t      agent_url;           /* "off": none */
    ngx_msec_t     upload_timeout;
    ngx_msec_t     period;
    ngx_msec_t     interval;
    ngx_uint_t     max_frames;
    size_t         memory_limit;
    ngx_str_t      service;
    ngx_str_t      env;
    ngx_str_t      version;
    ngx_array_t   *tags;                /* of ngx_str_t "key:value" */
} ngx_http_profiling_main_conf_t;


typedef struct {
    ngx_msec_t     min;
    ngx_msec_t     max;
    const char    *range;
} ngx_http_profiling_time_bounds_t;


static char *ngx_http_profiling(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_profiling_time(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_profiling_max_frames(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_profiling_memory_limit(ngx_conf_t *cf,
    ngx_command_t *cmd, void *conf);
static char *ngx_http_profiling_dump_dir(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_profiling_tags(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static char *ngx_http_profiling_agent_url(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf);
static void *ngx_http_profiling_create_main_conf(ngx_conf_t *cf);
static char *ngx_http_profiling_init_main_conf(ngx_conf_t *cf, void *conf);
static void *ngx_http_profiling_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_profiling_merge_loc_conf(ngx_conf_t *cf, void *parent,
    void *child);
static ngx_int_t ngx_http_profiling_postconfiguration(ngx_conf_t *cf);
static ngx_int_t ngx_http_profiling_init_module(ngx_cycle_t *cycle);
static void ngx_http_profiling_share_unwind_table(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_profiling_init_process(ngx_cycle_t *cycle);
static void ngx_http_profiling_exit_process(ngx_cycle_t *cycle);


static ngx_http_profiling_time_bounds_t  ngx_http_profiling_period_bounds = {
    1000, 600000, "between 1s and 10m"
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_interval_bounds =
{
    1, 1000, "between 1ms and 1s"
};

static ngx_http_profiling_time_bounds_t  ngx_http_profiling_upload_bounds = {
    100, 600000, "between 100ms and 10m"
};


static ngx_command_t  ngx_http_profiling_commands[] = {

    { ngx_string("profiling"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_FLAG,
      ngx_http_profiling,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, enable),
      NULL },

    { ngx_string("profiling_trace_id"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, trace_id),
      NULL },

    { ngx_string("profiling_span_id"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, span_id),
      NULL },

    { ngx_string("profiling_root_span_id"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, root_span_id),
      NULL },

    { ngx_string("profiling_endpoint"),
      NGX_HTTP_MAIN_CONF|NGX_HTTP_SRV_CONF|NGX_HTTP_LOC_CONF|NGX_CONF_TAKE1,
      ngx_http_set_complex_value_slot,
      NGX_HTTP_LOC_CONF_OFFSET,
      offsetof(ngx_http_profiling_loc_conf_t, endpoint),
      NULL },

    { ngx_string("profiling_dump_dir"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_dump_dir,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, dump_dir),
      NULL },

    { ngx_string("profiling_agent_url"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_agent_url,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, agent_url),
      NULL },

    { ngx_string("profiling_upload_timeout"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, upload_timeout),
      &ngx_http_profiling_upload_bounds },

    { ngx_string("profiling_period"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, period),
      &ngx_http_profiling_period_bounds },

    { ngx_string("profiling_interval"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_time,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, interval),
      &ngx_http_profiling_interval_bounds },

    { ngx_string("profiling_max_frames"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_max_frames,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, max_frames),
      NULL },

    { ngx_string("profiling_memory_limit"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_http_profiling_memory_limit,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, memory_limit),
      NULL },

    { ngx_string("profiling_service"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, service),
      NULL },

    { ngx_string("profiling_env"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, env),
      NULL },

    { ngx_string("profiling_version"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_TAKE1,
      ngx_conf_set_str_slot,
      NGX_HTTP_MAIN_CONF_OFFSET,
      offsetof(ngx_http_profiling_main_conf_t, version),
      NULL },

    { ngx_string("profiling_tags"),
      NGX_HTTP_MAIN_CONF|NGX_CONF_1MORE,
      ngx_http_profiling_tags,
      NGX_HTTP_MAIN_CONF_OFFSET,
      0,
      NULL },

      ngx_null_command
};


static ngx_http_module_t  ngx_http_profiling_module_ctx = {
    NULL,                                  /* preconfiguration */
    ngx_http_profiling_postconfiguration,  /* postconfiguration */

    ngx_http_profiling_create_main_conf,   /* create main configuration */
    ngx_http_profiling_init_main_conf,     /* init main configuration */

    NULL,                                  /* create server configuration */
    NULL,                                  /* merge server configuration */

    ngx_http_profiling_create_loc_conf,    /* create location configuration */
    ngx_http_profiling_merge_loc_conf      /* merge location configuration */
};


ngx_module_t  ngx_http_profiling_module = {
    NGX_MODULE_V1,
    &ngx_http_profiling_module_ctx,        /* module context */
    ngx_http_profiling_commands,           /* module directives */
    NGX_HTTP_MODULE,                       /* module type */
    NULL,                                  /* init master */
    ngx_http_profiling_init_module,        /* init module */
    ngx_http_profiling_init_process,       /* init process */
    NULL,                                  /* init thread */
    NULL,                                  /* exit thread */
    ngx_http_profiling_exit_process,       /* exit process */
    NULL,                                  /* exit master */
    NGX_MODULE_V1_PADDING
};


/* The profiler of this worker process, NULL when it does not sample. */
static prof_t                   *ngx_http_profiling_profiler;

/* Built by the master for the cycle, inherited by its workers. */
static prof_unwind_table_t      *ngx_http_profiling_unwind_table;
static ngx_event_t               ngx_http_profiling_flush_event;
static ngx_connection_t          ngx_http_profiling_flush_conn;
static ngx_msec_t                ngx_http_profiling_period_ms;
static ngx_uint_t                ngx_http_profiling_idle_captured;
static ngx_int_t               (*ngx_http_profiling_orig_process_events)(
    ngx_cycle_t *cycle, ngx_msec_t timer, ngx_uint_t flags);


static char *
ngx_http_profiling(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                            *rv;
    ngx_http_profiling_loc_conf_t   *plcf = conf;
    ngx_http_profiling_main_conf_t  *pmcf;

    rv = ngx_conf_set_flag_slot(cf, cmd, conf);
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    if (plcf->enable) {
        pmcf = ngx_http_conf_get_module_main_conf(cf,
                                                  ngx_http_profiling_module);
        pmcf->enabled_anywhere = 1;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_profiling_time(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    char                              *p = conf;
    ngx_str_t                         *value;
    ngx_msec_t                        *msp;
    ngx_http_profiling_time_bounds_t  *bounds = cmd->post;

    msp = (ngx_msec_t *) (p + cmd->offset);
    if (*msp != NGX_CONF_UNSET_MSEC) {
        return "is duplicate";
    }

    value = cf->args->elts;
    *msp = ngx_parse_time(&value[1], 0);

    if (*msp == (ngx_msec_t) NGX_ERROR
        || *msp < bounds->min || *msp > bounds->max)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a time %s",
                           &value[1], &cmd->name, bounds->range);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_profiling_max_frames(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_int_t   n;
    ngx_str_t  *value;

    if (pmcf->max_frames != NGX_CONF_UNSET_UINT) {
        return "is duplicate";
    }

    value = cf->args->elts;
    n = ngx_atoi(value[1].data, value[1].len);

    if (n == NGX_ERROR || n < 8 || n > PROF_MAX_FRAMES_LIMIT) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a number between 8 and %d",
                           &value[1], &cmd->name, PROF_MAX_FRAMES_LIMIT);
        return NGX_CONF_ERROR;
    }

    pmcf->max_frames = n;

    return NGX_CONF_OK;
}


static char *
ngx_http_profiling_memory_limit(ngx_conf_t *cf, ngx_command_t *cmd,
    void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ssize_t     size;
    ngx_str_t  *value;

    if (pmcf->memory_limit != NGX_CONF_UNSET_SIZE) {
        return "is duplicate";
    }

    value = cf->args->elts;

    /* ngx_parse_size() knows k and m; a memory limit may be in g. */
    if (value[1].len > 1
        && (value[1].data[value[1].len - 1] == 'g'
            || value[1].data[value[1].len - 1] == 'G'))
    {
        size = ngx_atosz(value[1].data, value[1].len - 1);
        size = (size == NGX_ERROR || size > 1) ? NGX_ERROR
                                               : size * 1024 * 1024 * 1024;

    } else {
        size = ngx_parse_size(&value[1]);
    }

    if (size == NGX_ERROR || size < 256 * 1024
        || size > 1024 * 1024 * 1024)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be a size between 256k and 1g",
                           &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->memory_limit = size;

    return NGX_CONF_OK;
}


static char *
ngx_http_profiling_dump_dir(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_str_t  *value;

    if (pmcf->dump_dir.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (value[1].len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"\" in \"%V\" directive",
                           &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->dump_dir = value[1];

    if (ngx_conf_full_name(cf->cycle, &pmcf->dump_dir, 0) != NGX_OK) {
        return NGX_CONF_ERROR;
    }

    /* Trailing slashes would double in file names. */
    while (pmcf->dump_dir.len > 1
           && pmcf->dump_dir.data[pmcf->dump_dir.len - 1] == '/')
    {
        pmcf->dump_dir.len--;
    }

    return NGX_CONF_OK;
}


static char *
ngx_http_profiling_tags(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    u_char      *colon;
    ngx_str_t   *value, *tag;
    ngx_uint_t   i;

    if (pmcf->tags == NULL) {
        pmcf->tags = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
        if (pmcf->tags == NULL) {
            return NGX_CONF_ERROR;
        }
    }

    value = cf->args->elts;

    for (i = 1; i < cf->args->nelts; i++) {
        colon = ngx_strlchr(value[i].data, value[i].data + value[i].len, ':');

        /* Commas in values are replaced when the tags are sent. */
        if (colon == NULL || colon == value[i].data
            || colon == value[i].data + value[i].len - 1)
        {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%V\" in \"%V\" directive, "
                               "it must be \"key:value\"",
                               &value[i], &cmd->name);
            return NGX_CONF_ERROR;
        }

        tag = ngx_array_push(pmcf->tags);
        if (tag == NULL) {
            return NGX_CONF_ERROR;
        }

        *tag = value[i];
    }

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_profiling_valid_url(ngx_str_t *url)
{
    size_t  n;

    if (url->len > 6 && ngx_strncmp(url->data, "unix:/", 6) == 0) {
        return NGX_OK;
    }

    n = 0;
    if (url->len > 7 && ngx_strncmp(url->data, "http://", 7) == 0) {
        n = 7;

    } else if (url->len > 8 && ngx_strncmp(url->data, "https://", 8) == 0) {
        n = 8;
    }

    if (n == 0 || url->data[n] == '/' || url->data[n] == ':') {
        return NGX_ERROR;
    }

    return NGX_OK;
}


static char *
ngx_http_profiling_agent_url(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_str_t  *value;

    if (pmcf->agent_url.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    if (ngx_strcmp(value[1].data, "off") != 0
        && ngx_http_profiling_valid_url(&value[1]) != NGX_OK)
    {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "invalid value \"%V\" in \"%V\" directive, "
                           "it must be \"http://host:port\", "
                           "\"https://host:port\", \"unix:/path\" "
                           "or \"off\"", &value[1], &cmd->name);
        return NGX_CONF_ERROR;
    }

    pmcf->agent_url = value[1];

    return NGX_CONF_OK;
}


/*
 * A DD_* variable as the workers will not see it: "env NAME=value;" in the
 * configuration first, else the master's environment.
 */
static char *
ngx_http_profiling_getenv(ngx_conf_t *cf, const char *name)
{
    size_t            len;
    ngx_str_t        *var;
    ngx_uint_t        i;
    ngx_core_conf_t  *ccf;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cf->cycle->conf_ctx,
                                           ngx_core_module);
    len = ngx_strlen(name);

    if (ccf != NULL && ccf->env.elts != NULL) {
        var = ccf->env.elts;

        /* For "NAME=value", nginx keeps len = NAME's, data the whole. */
        for (i = 0; i < ccf->env.nelts; i++) {
            if (var[i].len == len && var[i].data[len] == '='
                && ngx_strncmp(var[i].data, name, len) == 0)
            {
                return (char *) var[i].data + len + 1;
            }
        }
    }

    return getenv(name);
}


static ngx_int_t
ngx_http_profiling_set_env_str(ngx_conf_t *cf, ngx_str_t *s, const char *name)
{
    char  *value;

    if (s->data != NULL) {
        return NGX_OK;
    }

    value = ngx_http_profiling_getenv(cf, name);
    if (value == NULL || value[0] == '\0') {
        return NGX_OK;
    }

    s->len = ngx_strlen(value);
    s->data = ngx_pstrdup(cf->pool, &(ngx_str_t) { s->len, (u_char *) value });

    return (s->data != NULL) ? NGX_OK : NGX_ERROR;
}


/* DD_TAGS: "key:value" items separated by commas or spaces. */
static ngx_int_t
ngx_http_profiling_env_tags(ngx_conf_t *cf,
    ngx_http_profiling_main_conf_t *pmcf)
{
    u_char     *p, *last, *start;
    char       *value;
    ngx_str_t  *tag;

    value = ngx_http_profiling_getenv(cf, "DD_TAGS");
    if (pmcf->tags != NULL || value == NULL) {
        return NGX_OK;
    }

    pmcf->tags = ngx_array_create(cf->pool, 4, sizeof(ngx_str_t));
    if (pmcf->tags == NULL) {
        return NGX_ERROR;
    }

    p = (u_char *) value;
    last = p + ngx_strlen(value);

    while (p < last) {
        while (p < last && (*p == ',' || *p == ' ')) {
            p++;
        }

        start = p;
        while (p < last && *p != ',' && *p != ' ') {
            p++;
        }

        if (p == start || ngx_strlchr(start, p, ':') == NULL) {
            continue;
        }

        tag = ngx_array_push(pmcf->tags);
        if (tag == NULL) {
            return NGX_ERROR;
        }

        tag->len = p - start;
        tag->data = ngx_pstrdup(cf->pool, &(ngx_str_t) { tag->len, start });
        if (tag->data == NULL) {
            return NGX_ERROR;
        }
    }

    return NGX_OK;
}


/* The agent's address when no profiling_agent_url says it. */
static ngx_int_t
ngx_http_profiling_default_agent(ngx_conf_t *cf, ngx_str_t *url)
{
    char             *value, *host, *port;
    ngx_file_info_t   fi;

    value = ngx_http_profiling_getenv(cf, "DD_TRACE_AGENT_URL");

    if (value != NULL && value[0] != '\0') {
        if (ngx_strncmp(value, "unix://", 7) == 0) {
            value += 7;
        }

        if (value[0] == '/') {
            url->len = ngx_strlen(value) + 5;
            url->data = ngx_pnalloc(cf->pool, url->len + 1);
            if (url->data == NULL) {
                return NGX_ERROR;
            }
            ngx_sprintf(url->data, "unix:%s%Z", value);
            return NGX_OK;
        }

        url->len = ngx_strlen(value);
        url->data = (u_char *) value;

        if (ngx_http_profiling_valid_url(url) != NGX_OK) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "invalid value \"%s\" in the "
                               "DD_TRACE_AGENT_URL environment variable "
                               "(the profiling_agent_url default)", value);
            return NGX_ERROR;
        }

        url->data = ngx_pstrdup(cf->pool, url);
        return (url->data != NULL) ? NGX_OK : NGX_ERROR;
    }

    host = ngx_http_profiling_getenv(cf, "DD_AGENT_HOST");
    port = ngx_http_profiling_getenv(cf, "DD_TRACE_AGENT_PORT");

    if ((host == NULL || host[0] == '\0') && (port == NULL || port[0] == '\0')
        && ngx_file_info(NGX_HTTP_PROFILING_APM_SOCKET, &fi) == 0)
    {
        ngx_str_set(url, "unix:" NGX_HTTP_PROFILING_APM_SOCKET);
        return NGX_OK;
    }

    if (host == NULL || host[0] == '\0') {
        host = "localhost";
    }

    if (port == NULL || port[0] == '\0') {
        port = "8126";
    }

    url->data = ngx_pnalloc(cf->pool, ngx_strlen(host) + ngx_strlen(port)
                                      + sizeof("http://[]:"));
    if (url->data == NULL) {
        return NGX_ERROR;
    }

    /* Brackets around an IPv6 address. */
    if (ngx_strchr(host, ':') != NULL && host[0] != '[') {
        url->len = ngx_sprintf(url->data, "http://[%s]:%s", host, port)
                   - url->data;
    } else {
        url->len = ngx_sprintf(url->data, "http://%s:%s", host, port)
                   - url->data;
    }

    return NGX_OK;
}


static void *
ngx_http_profiling_create_main_conf(ngx_conf_t *cf)
{
    ngx_http_profiling_main_conf_t  *pmcf;

    pmcf = ngx_pcalloc(cf->pool, sizeof(ngx_http_profiling_main_conf_t));
    if (pmcf == NULL) {
        return NULL;
    }

    /*
     * set by ngx_pcalloc():
     *
     *     pmcf->enabled_anywhere = 0;
     *     pmcf->dump_dir = { 0, NULL };
     *     pmcf->agent_url = { 0, NULL };
     *     pmcf->service = { 0, NULL };
     *     pmcf->env = { 0, NULL };
     *     pmcf->version = { 0, NULL };
     *     pmcf->tags = NULL;
     */

    pmcf->upload_timeout = NGX_CONF_UNSET_MSEC;
    pmcf->period = NGX_CONF_UNSET_MSEC;
    pmcf->interval = NGX_CONF_UNSET_MSEC;
    pmcf->max_frames = NGX_CONF_UNSET_UINT;
    pmcf->memory_limit = NGX_CONF_UNSET_SIZE;

    return pmcf;
}


static char *
ngx_http_profiling_init_main_conf(ngx_conf_t *cf, void *conf)
{
    ngx_http_profiling_main_conf_t  *pmcf = conf;

    ngx_conf_init_msec_value(pmcf->period, 60000);
    ngx_conf_init_msec_value(pmcf->interval, 10);
    ngx_conf_init_uint_value(pmcf->max_frames, 64);
    ngx_conf_init_size_value(pmcf->memory_limit, 8 * 1024 * 1024);

    ngx_conf_init_msec_value(pmcf->upload_timeout, 10000);

    /* Read here, in the master: workers lose the environment. */

    if (ngx_http_profiling_set_env_str(cf, &pmcf->service, "DD_SERVICE")
            != NGX_OK
        || ngx_http_profiling_set_env_str(cf, &pmcf->env, "DD_ENV") != NGX_OK
        || ngx_http_profiling_set_env_str(cf, &pmcf->version, "DD_VERSION")
           != NGX_OK
        || ngx_http_profiling_env_tags(cf, pmcf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    if (pmcf->service.data == NULL) {
        ngx_str_set(&pmcf->service, "nginx");
    }

    if (pmcf->agent_url.data == NULL
        && ngx_http_profiling_default_agent(cf, &pmcf->agent_url) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


static void *
ngx_http_profiling_create_loc_conf(ngx_conf_t *cf)
{
    ngx_http_profiling_loc_conf_t  *plcf;

    plcf = ngx_palloc(cf->pool, sizeof(ngx_http_profiling_loc_conf_t));
    if (plcf == NULL) {
        return NULL;
    }

    plcf->enable = NGX_CONF_UNSET;
    plcf->trace_id = NGX_CONF_UNSET_PTR;
    plcf->span_id = NGX_CONF_UNSET_PTR;
    plcf->root_span_id = NGX_CONF_UNSET_PTR;
    plcf->endpoint = NGX_CONF_UNSET_PTR;

    return plcf;
}


static char *
ngx_http_profiling_merge_loc_conf(ngx_conf_t *cf, void *parent, void *child)
{
    ngx_http_profiling_loc_conf_t  *prev = parent;
    ngx_http_profiling_loc_conf_t  *conf = child;

    ngx_conf_merge_value(conf->enable, prev->enable, 0);
    ngx_conf_merge_ptr_value(conf->trace_id, prev->trace_id, NULL);
    ngx_conf_merge_ptr_value(conf->span_id, prev->span_id, NULL);
    ngx_conf_merge_ptr_value(conf->root_span_id, prev->root_span_id, NULL);
    ngx_conf_merge_ptr_value(conf->endpoint, prev->endpoint, NULL);

    return NGX_CONF_OK;
}


static ngx_int_t
ngx_http_profiling_postconfiguration(ngx_conf_t *cf)
{
    return ngx_http_profiling_request_init(cf);
}


static void
ngx_http_profiling_free_unwind_table(void *data)
{
    if (ngx_http_profiling_unwind_table == data) {
        ngx_http_profiling_unwind_table = NULL;
    }

    prof_unwind_table_free(data);
}


/*
 * The unwind tables of the objects loaded now (nginx, its modules and
 * libraries), built once in the master: every worker inherits them with
 * fork instead of building its own (~12 ms and 2.5 MB each). They go with
 * the cycle; a worker started later with a table of an older cycle still
 * has its own copy.
 */
static void
ngx_http_profiling_share_unwind_table(ngx_cycle_t *cycle)
{
    ngx_core_conf_t     *ccf;
    ngx_pool_cleanup_t  *cln;
    prof_unwind_table_t *t;

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    /* Without a master, the worker's own sampler builds it; a process
       that only signals the master needs none. */
    if (!ccf->master || ngx_process == NGX_PROCESS_SIGNALLER) {
        return;
    }

    cln = ngx_pool_cleanup_add(cycle->pool, 0);
    if (cln == NULL) {
        return;
    }

    t = prof_unwind_table_build();
    if (t == NULL) {
        return;
    }

    cln->handler = ngx_http_profiling_free_unwind_table;
    cln->data = t;
    ngx_http_profiling_unwind_table = t;
}


/*
 * In the master, as root: build the unwind tables, create the dump
 * directory for the workers' user, as nginx does for its temporary paths.
 */
static ngx_int_t
ngx_http_profiling_init_module(ngx_cycle_t *cycle)
{
    u_char                          *path;
    ngx_core_conf_t                 *ccf;
    ngx_file_info_t                  fi;
    ngx_http_profiling_main_conf_t  *pmcf;

    ngx_http_profiling_request_init_cycle(cycle);

    pmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_profiling_module);

    if (pmcf == NULL || !pmcf->enabled_anywhere || ngx_test_config) {
        return NGX_OK;
    }

    ngx_http_profiling_share_unwind_table(cycle);

    if (pmcf->dump_dir.len == 0) {
        return NGX_OK;
    }

    path = ngx_pnalloc(cycle->pool, pmcf->dump_dir.len + 1);
    if (path == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn(path, pmcf->dump_dir.data, pmcf->dump_dir.len + 1);

    if (ngx_file_info(path, &fi) == 0) {
        if (!ngx_is_dir(&fi)) {
            ngx_log_error(NGX_LOG_ERR, cycle->log, 0,
                          "profiling_dump_dir \"%s\" is not a directory, "
                          "profiles will not be written", path);
        }
        return NGX_OK;
    }

    if (ngx_create_dir(path, 0700) == NGX_FILE_ERROR) {
        ngx_log_error(NGX_LOG_ERR, cycle->log, ngx_errno,
                      ngx_create_dir_n " \"%s\" failed, "
                      "profiles will not be written", path);
        return NGX_OK;
    }

    ccf = (ngx_core_conf_t *) ngx_get_conf(cycle->conf_ctx, ngx_core_module);

    if (geteuid() == 0 && ccf->user != (ngx_uid_t) NGX_CONF_UNSET_UINT
        && chown((char *) path, ccf->user, ccf->group) == -1)
    {
        ngx_log_error(NGX_LOG_ERR, cycle->log, ngx_errno,
                      "chown(\"%s\", %d) failed", path, ccf->user);
    }

    return NGX_OK;
}


static void
ngx_http_profiling_log(void *data, int level, const char *message)
{
    static const ngx_uint_t  levels[] = {
        NGX_LOG_ERR, NGX_LOG_WARN, NGX_LOG_NOTICE, NGX_LOG_INFO
    };

    ngx_log_error(levels[level], ngx_cycle->log, 0, "%s", message);
}


static void
ngx_http_profiling_flush_handler(ngx_event_t *ev)
{
    prof_flush(ngx_http_profiling_profiler,
               ngx_http_profiling_take_endpoint_counts());

    ngx_add_timer(ev, ngx_http_profiling_period_ms);
}


/*
 * Wraps the event module's process_events: brackets the event wait (the
 * sampler does not signal a worker parked there, and gives its wall time
 * to the stack captured here once), then runs the ready handlers, each
 * with its request's context published to the sampler.
 */
static ngx_int_t
ngx_http_profiling_process_events(ngx_cycle_t *cycle, ngx_msec_t timer,
    ngx_uint_t flags)
{
    ngx_int_t        rc;
    ngx_uint_t       n;
    uint64_t         leaf[2];
    ngx_queue_t     *q;
    ngx_event_t     *ev;
    prof_sampler_t  *sampler;

    sampler = ngx_http_profiling_sampler;

    if (!ngx_http_profiling_idle_captured) {
        ngx_http_profiling_idle_captured = 1;
        n = 0;

#if (NGX_HAVE_EPOLL)
        if (ngx_event_flags & NGX_USE_EPOLL_EVENT) {
            leaf[n++] = (uint64_t) (uintptr_t) epoll_wait;
        }
#endif

        /* A return address: the aggregator moves it back by one. */
        leaf[n++] = (uint64_t) (uintptr_t)
                    ngx_http_profiling_orig_process_events + 1;

        /* Skip the capturing function and this one. */
        prof_sampler_capture_idle_stack(sampler, leaf, n, 2);
    }

    /* Back in the event loop: no request executes (timers had theirs). */
    ngx_http_profiling_request_leave();

    /*
     * With NGX_POST_EVENTS the event module only waits and queues what is
     * ready (as nginx does when it holds the accept mutex), so the bracket
     * covers the wait alone.
     */
    prof_sampler_set_waiting(sampler, 1);
    rc = ngx_http_profiling_orig_process_events(cycle, timer,
                                                flags | NGX_POST_EVENTS);
    prof_sampler_set_waiting(sampler, 0);

    /*
     * The queued handlers run here, then the expired timers, each with its
     * request's context (nginx finds nothing left to run). With the accept
     * mutex held, nginx still runs the queued accept events after this.
     */
    while (!ngx_queue_empty(&ngx_posted_events)) {
        q = ngx_queue_head(&ngx_posted_events);
        ev = ngx_queue_data(q, ngx_event_t, queue);
        ngx_delete_posted_event(ev);
        ngx_http_profiling_dispatch(ev);
    }

    ngx_http_profiling_expire_timers();

    return rc;
}


/* A NUL-terminated copy, NULL for an empty or unset string. */
static char *
ngx_http_profiling_cstr(ngx_pool_t *pool, ngx_str_t *s)
{
    u_char  *p;

    if (s->len == 0) {
        return NULL;
    }

    p = ngx_pnalloc(pool, s->len + 1);
    if (p == NULL) {
        return NULL;
    }

    ngx_cpystrn(p, s->data, s->len + 1);

    return (char *) p;
}


static ngx_int_t
ngx_http_profiling_init_process(ngx_cycle_t *cycle)
{
    int                              rc;
    char                           **tags;
    ngx_str_t                       *tag;
    ngx_uint_t                       i;
    prof_conf_t                      conf;
    ngx_http_profiling_main_conf_t  *pmcf;

    pmcf = ngx_http_cycle_get_module_main_conf(cycle,
                                               ngx_http_profiling_module);

    if (pmcf == NULL || !pmcf->enabled_anywhere) {
        return NGX_OK;
    }

    if (ngx_process != NGX_PROCESS_WORKER
        && ngx_process != NGX_PROCESS_SINGLE)
    {
        return NGX_OK;
    }

    ngx_memzero(&conf, sizeof(prof_conf_t));

    if (pmcf->tags != NULL && pmcf->tags->nelts > 0) {
        tags = ngx_pcalloc(cycle->pool, pmcf->tags->nelts * sizeof(char *));
        if (tags == NULL) {
            return NGX_OK;
        }

        tag = pmcf->tags->elts;
        for (i = 0; i < pmcf->tags->nelts; i++) {
            tags[i] = ngx_http_profiling_cstr(cycle->pool, &tag[i]);
            if (tags[i] == NULL) {
                return NGX_OK;
            }
        }

        conf.tags = (const char * const *) tags;
        conf.tag_count = pmcf->tags->nelts;
    }

    conf.interval_ns = (int64_t) pmcf->interval * 1000000;
    conf.max_frames = pmcf->max_frames;
    conf.memory_limit = pmcf->memory_limit;
    conf.dump_dir = ngx_http_profiling_cstr(cycle->pool, &pmcf->dump_dir);
    conf.service = ngx_http_profiling_cstr(cycle->pool, &pmcf->service);
    conf.env = ngx_http_profiling_cstr(cycle->pool, &pmcf->env);
    conf.version = ngx_http_profiling_cstr(cycle->pool, &pmcf->version);
    conf.runtime_version = NGINX_VERSION;
    conf.upload_timeout_ms = pmcf->upload_timeout;
    conf.log = ngx_http_profiling_log;
    conf.unwind_table = ngx_http_profiling_unwind_table;

    if (ngx_strcmp(pmcf->agent_url.data, "off") != 0) {
        conf.agent_url = ngx_http_profiling_cstr(cycle->pool,
                                                 &pmcf->agent_url);
    }

    /* The last profile's export is bounded: see exit_process. */
    conf.final_timeout_ms = (conf.agent_url != NULL)
                            ? (int64_t) pmcf->upload_timeout + 1000 : 5000;

    rc = prof_start(&ngx_http_profiling_profiler, &conf);

    if (rc != 0) {
        /* Never fail the worker: it serves without the profiler. */
        ngx_log_error(NGX_LOG_ALERT, cycle->log, -rc,
                      "profiling: the sampler could not start, "
                      "profiling is disabled in this process");
        ngx_http_profiling_profiler = NULL;
        return NGX_OK;
    }

    ngx_http_profiling_sampler = prof_get_sampler(ngx_http_profiling_profiler);
    ngx_http_profiling_orig_process_events = ngx_event_actions.process_events;
    ngx_event_actions.process_events = ngx_http_profiling_process_events;
    ngx_http_profiling_idle_captured = 0;

    ngx_http_profiling_period_ms = pmcf->period;

    ngx_http_profiling_flush_conn.fd = (ngx_socket_t) -1;
    ngx_http_profiling_flush_event.data = &ngx_http_profiling_flush_conn;
    ngx_http_profiling_flush_event.handler = ngx_http_profiling_flush_handler;
    ngx_http_profiling_flush_event.log = cycle->log;
    ngx_http_profiling_flush_event.cancelable = 1;

    /* From now: the profile started in prof_start, nginx's clock earlier. */
    ngx_time_update();
    ngx_add_timer(&ngx_http_profiling_flush_event, pmcf->period);

    ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
                  "profiling: sampling every %Mms, a profile every %Mms, "
                  "to %s%s%s", pmcf->interval, pmcf->period,
                  conf.dump_dir ? conf.dump_dir : "",
                  (conf.dump_dir && conf.agent_url) ? " and " : "",
                  conf.agent_url ? conf.agent_url : "");

    return NGX_OK;
}


static void
ngx_http_profiling_exit_process(ngx_cycle_t *cycle)
{
    if (ngx_http_profiling_profiler == NULL) {
        return;
    }

    if (ngx_http_profiling_flush_event.timer_set) {
        ngx_del_timer(&ngx_http_profiling_flush_event);
    }

    ngx_event_actions.process_events = ngx_http_profiling_orig_process_events;
    ngx_http_profiling_request_leave();
    ngx_http_profiling_sampler = NULL;

    /* The requests of the last, partial period are counted in it too. */
    prof_stop(ngx_http_profiling_profiler,
              ngx_http_profiling_take_endpoint_counts());
    ngx_http_profiling_profiler = NULL;
}
