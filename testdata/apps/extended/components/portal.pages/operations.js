exports.render = async (input) => ({ output: 'page ' + input.path })
