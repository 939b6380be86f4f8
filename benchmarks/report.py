"""The benchmarks' report: a text table, or a Markdown one for the README, labelled with the machine and the date."""
from harness import human_bytes


def fmt(value, unit):
    if unit == 'bytes':
        return human_bytes(value)
    if unit == 's':
        return '%.2f s' % value
    if unit == 'ms':
        return '%.1f ms' % value
    if unit == 'x':
        return '%.2fx' % value
    if unit == 'cores':
        return '%.2f' % value
    return '%d' % value


def rows(result):
    """[benchmark, figure, median, min, max, goal, result] for each figure."""
    table = []
    for bench in result['benchmarks']:
        for index, fig in enumerate(bench['figures']):
            single = len(fig['values']) == 1
            table.append([bench['title'] if index == 0 else '', fig['label'], fmt(fig['median'], fig['unit']),
                          '' if single else fmt(fig['min'], fig['unit']),
                          '' if single else fmt(fig['max'], fig['unit']),
                          fig.get('goal', {}).get('text', ''),
                          ('PASS' if fig['pass'] else 'MISS') if 'goal' in fig else ''])
    return table


HEADER = ['Benchmark', 'Figure', 'Median', 'Min', 'Max', 'Goal', 'Result']


def machine_label(result):
    m = result['machine']
    how = ('quick mode (tiny sizes, %d run, no warm-up): a smoke test, its figures and goals mean nothing'
           % result['settings']['runs'] if result['settings']['quick']
           else 'median of %d run(s) after %d warm-up' % (result['settings']['runs'], result['settings']['warmup']))
    return ('%s on %d CPUs (%s), %s GiB RAM, work dir on %s (%s); load average %.2f at the start; %s; '
            'bytes written from /proc/<pid>/io %s' % (
                result['date'], m['nproc'], m['cpu'], m['memory_gib'], m['filesystem']['type'],
                m['filesystem']['source'], m['loadavg_start'], how, result['io_counter']))


def text_table(result):
    table = [HEADER] + rows(result)
    widths = [max(len(row[i]) for row in table) for i in range(len(HEADER))]
    lines = [machine_label(result), '']
    for number, row in enumerate(table):
        lines.append('  '.join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        if number == 0:
            lines.append('  '.join('-' * width for width in widths))
    return '\n'.join(lines)


def markdown_table(result):
    lines = ['Measured %s.' % machine_label(result), '',
             '| ' + ' | '.join(HEADER) + ' |', '|' + '|'.join(['---'] * 2 + ['---:'] * 3 + ['---'] * 2) + '|']
    for row in rows(result):
        lines.append('| ' + ' | '.join(cell.replace('|', '\\|') for cell in row) + ' |')
    return '\n'.join(lines)
